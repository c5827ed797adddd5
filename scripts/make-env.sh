#!/bin/sh
# Write the .env that compose.yaml requires: a random API token and Postgres password,
# mode 0600. Refuses to overwrite an existing file (rotating secrets is a deliberate act).
set -eu
dest="${1:-.env}"
if [ -e "$dest" ]; then
    echo "make-env: $dest already exists; not overwriting (delete it to rotate secrets)" >&2
    exit 1
fi
rand() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
token="$(rand)"
password="$(rand)"
umask 077
set -C  # noclobber: the redirect fails if the file appeared since the check above
{
    echo "# docker compose settings for wakemark, from scripts/make-env.sh. Keep it secret."
    echo "WAKEMARK_TOKEN=$token"
    echo "POSTGRES_PASSWORD=$password"
    echo "WAKEMARK_PORT=37800"
} >"$dest"
chmod 600 "$dest"
echo "make-env: wrote $dest (0600)" >&2
