#!/bin/sh
# Write the .env that compose.yaml requires, mode 0600: a random API token, Postgres
# superuser password, password of the app's database role and Redis password. Never
# changes a value that is there (rotating secrets is a deliberate act): an existing file
# only gets the secrets it lacks (an older .env, from before the app role and the Redis
# password), and is left alone when it has them all.
set -eu
dest="${1:-.env}"
rand() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
keys="WAKEMARK_TOKEN POSTGRES_PASSWORD POSTGRES_APP_PASSWORD REDIS_PASSWORD"
umask 077
if [ -e "$dest" ]; then
    added=""
    for key in $keys; do
        if ! grep -q "^$key=" "$dest"; then
            echo "$key=$(rand)" >>"$dest"
            added="$added $key"
        fi
    done
    if [ -z "$added" ]; then
        echo "make-env: $dest already exists; not overwriting (delete it to rotate secrets)" >&2
        exit 1
    fi
    chmod 600 "$dest"
    echo "make-env: added$added to $dest (0600)" >&2
    exit 0
fi
set -C  # noclobber: the redirect fails if the file appeared since the check above
{
    echo "# docker compose settings for wakemark, from scripts/make-env.sh. Keep it secret."
    for key in $keys; do echo "$key=$(rand)"; done
    echo "WAKEMARK_PORT=37800"
} >"$dest"
chmod 600 "$dest"
echo "make-env: wrote $dest (0600)" >&2
