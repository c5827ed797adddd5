#!/bin/sh
# engram image entry point: the container's command names the role it plays.
#   api | worker [-Q queues] [--concurrency N] | beat | migrate | <any command>
set -eu
role="${1:-api}"
if [ "$#" -gt 0 ]; then shift; fi
case "$role" in
    # gunicorn (gthread, --max-requests with jitter) bound to ENGRAM_HOST=0.0.0.0.
    api) exec engram serve "$@" ;;
    worker) exec engram worker "$@" ;;
    # Run exactly one beat per deployment, or every sweep is scheduled twice.
    beat) exec engram beat "$@" ;;
    migrate) exec engram migrate "$@" ;;
    *) exec "$role" "$@" ;;
esac
