#!/usr/bin/env bash
# Build and install the pgvector extension for the machine's PostgreSQL.
#
# pgvector is not packaged for Debian 12 (bookworm), so we build it from
# Debian's own source package in trixie. Only a *deb-src* entry for trixie is
# added, so no binary package can ever be pulled from trixie.
#
# Idempotent: exits at once when a recent enough vector.control is installed.
#
# Env:
#   PG_MAJOR            PostgreSQL major version (default 15)
#   PGVECTOR_MIN        minimum acceptable pgvector version (default 0.8.0:
#                       HNSW iterative index scans, hnsw.iterative_scan)
#   PGVECTOR_NO_VERIFY  set to 1 to skip the post-install check against the server
set -euo pipefail

PG_MAJOR="${PG_MAJOR:-15}"
PGVECTOR_MIN="${PGVECTOR_MIN:-0.8.0}"
PG_CONFIG="/usr/lib/postgresql/${PG_MAJOR}/bin/pg_config"
EXT_DIR="/usr/share/postgresql/${PG_MAJOR}/extension"
CONTROL="${EXT_DIR}/vector.control"
SRC_LIST="/etc/apt/sources.list.d/trixie-src.sources"
APT_OPTS=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=300)
export DEBIAN_FRONTEND=noninteractive

log() { printf '[install-pgvector] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# version_ge A B: true when version A >= version B
version_ge() { dpkg --compare-versions "$1" ge "$2"; }

installed_version() {
    [[ -f "$CONTROL" ]] || return 1
    sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\{0,1\}\([^']*\)'\{0,1\}.*/\1/p" "$CONTROL" | head -n1
}

verify() {
    if [[ "${PGVECTOR_NO_VERIFY:-0}" == 1 ]]; then return 0; fi
    if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
        log "PostgreSQL not reachable on 127.0.0.1:5432; skipping server-side check"
        return 0
    fi
    local db="pgvector_selfcheck_$$"
    local psql=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres)
    "${psql[@]}" -d postgres -c "CREATE DATABASE ${db}" >/dev/null
    # shellcheck disable=SC2064
    trap "'${psql[0]}' -X -q -h 127.0.0.1 -U postgres -d postgres -c 'DROP DATABASE IF EXISTS ${db}' >/dev/null 2>&1 || true" RETURN
    "${psql[@]}" -d "$db" -At <<'SQL'
CREATE EXTENSION vector;
CREATE TABLE t (id int, v vector(3));
INSERT INTO t VALUES (1,'[1,2,3]'),(2,'[3,2,1]'),(3,'[0,0,1]');
CREATE INDEX ON t USING hnsw (v vector_cosine_ops);
SET hnsw.iterative_scan = relaxed_order;
SET enable_seqscan = off;
SELECT 'pgvector ' || extversion || ' ok, hnsw.iterative_scan=' || current_setting('hnsw.iterative_scan')
  FROM pg_extension WHERE extname = 'vector';
SELECT 'nearest id=' || id FROM t ORDER BY v <=> '[1,2,3]' LIMIT 1;
SQL
}

# ---------------------------------------------------------------- fast path
if cur="$(installed_version)" && [[ -n "$cur" ]] && version_ge "$cur" "$PGVECTOR_MIN"; then
    log "pgvector ${cur} already installed for PostgreSQL ${PG_MAJOR}"
    exit 0
fi

[[ $EUID -eq 0 ]] || die "must run as root"
start=$SECONDS

# ------------------------------------------------- deb-src entry for trixie
# Reuse the Debian mirror this machine is already configured with.
find_mirror() {
    local f
    # deb822 *.sources files: "URIs: http://host/debian" (skip debian-security etc.)
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" && "$f" != "$SRC_LIST" ]] || continue
        awk 'tolower($1)=="uris:" { for (i=2;i<=NF;i++) print $i }' "$f"
    done
    # one-line style sources.list(.d)/*.list
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "$f" ]] || continue
        awk '$1=="deb" || $1=="deb-src" {
                for (i=2;i<=NF;i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }' "$f"
    done
}
MIRROR="$(find_mirror | sed 's:/*$::' | grep -E '/debian$' | head -n1 || true)"
[[ -n "$MIRROR" ]] || die "could not find the Debian mirror in /etc/apt/sources.list(.d)"
log "using Debian mirror ${MIRROR}"

KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
want_list="Types: deb-src
URIs: ${MIRROR}
Suites: trixie
Components: main"
[[ -f "$KEYRING" ]] && want_list+=$'\n'"Signed-By: ${KEYRING}"
if [[ ! -f "$SRC_LIST" ]] || [[ "$(cat "$SRC_LIST")" != "# Added by wakemark scripts/install-pgvector.sh: source packages only (no binaries from trixie)"$'\n'"$want_list" ]]; then
    printf '# Added by wakemark scripts/install-pgvector.sh: source packages only (no binaries from trixie)\n%s\n' \
        "$want_list" > "$SRC_LIST"
fi

log "apt-get update"
apt-get update -q -o DPkg::Lock::Timeout=300 >/dev/null

# Guard: nothing binary may come from trixie (source-only entries never show
# up in `apt-cache policy`; a binary one would, as "... trixie/main amd64 Packages").
if apt-cache policy | grep -Eq '[[:space:]]trixie(-[a-z]+)?/[a-z-]+ [a-z0-9]+ Packages'; then
    die "a binary trixie repository is configured; refusing to continue"
fi

log "installing build dependencies"
apt-get install "${APT_OPTS[@]}" \
    "postgresql-server-dev-${PG_MAJOR}" build-essential dpkg-dev >/dev/null

[[ -x "$PG_CONFIG" ]] || die "$PG_CONFIG missing after installing postgresql-server-dev-${PG_MAJOR}"

# ---------------------------------------------------------------- build
work="$(mktemp -d /tmp/pgvector-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cd "$work"
log "apt-get source pgvector (into $work)"
# -q: quieter; source is verified against the signed Sources index.
apt-get source -q --only-source pgvector >/dev/null 2>"$work/source.log" \
    || { cat "$work/source.log" >&2; die "apt-get source pgvector failed"; }
srcdir="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'pgvector-*' | head -n1)"
[[ -n "$srcdir" ]] || die "no pgvector source directory after apt-get source"
cd "$srcdir"

src_version="$(sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" vector.control)"
version_ge "$src_version" "$PGVECTOR_MIN" \
    || die "trixie ships pgvector ${src_version} < required ${PGVECTOR_MIN}"
grep -q 'hnsw.iterative_scan' src/*.c || die "pgvector ${src_version} has no hnsw.iterative_scan"

log "building pgvector ${src_version}"
# OPTFLAGS="": no -march=native, so the build does not depend on this CPU.
make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" >"$work/build.log" 2>&1 \
    || { tail -n 50 "$work/build.log" >&2; die "make failed"; }
make install PG_CONFIG="$PG_CONFIG" OPTFLAGS="" >"$work/install.log" 2>&1 \
    || { tail -n 50 "$work/install.log" >&2; die "make install failed"; }

[[ -f "$CONTROL" ]] || die "$CONTROL missing after make install"
log "installed pgvector $(installed_version) in $((SECONDS - start))s"

cd /
verify
