#!/bin/sh
# wakemark image entry point: the container's command names the role it plays.
#   api | worker [-Q queues] [--concurrency N] | beat | migrate | tests | <any command>
set -eu
role="${1:-api}"
if [ "$#" -gt 0 ]; then shift; fi
case "$role" in
    # gunicorn (services/api/polled.py's workers, --max-requests with jitter) bound to WAKEMARK_HOST=0.0.0.0.
    api) exec wakemark serve "$@" ;;
    worker) exec wakemark worker "$@" ;;
    # Run exactly one beat per deployment, or every sweep is scheduled twice.
    beat) exec wakemark beat "$@" ;;
    migrate) exec wakemark migrate "$@" ;;
    # The integration suite, against WAKEMARK_TEST_DATABASE_URL and WAKEMARK_TEST_REDIS_URL
    # (compose's `tests` service; `make test` runs this same line natively).
    tests) exec python -m pytest -m "postgres or redis" "$@" ;;
    *) exec "$role" "$@" ;;
esac
