#!/usr/bin/env bash
# The interpreter matrix (.ci/run's "python matrix" phase; not part of `make test`):
# on every Python 3.11-3.13 found except the one given (the main suite's), build the
# wheel, install it into a fresh venv and run the packaging test plus a smoke subset that
# needs no service. The interpreters run side by side, each in its own temp folder.
#
#   scripts/python-matrix.sh 3.11      # skip 3.11, run the others found
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
SKIP="${1:-}"

# Needs no service: CLI, SQLite storage conformance, the vector cache (its scan is a
# compiled dependency), API, extraction.
SMOKE=(
    tests/test_packaging.py
    tests/test_cli.py
    tests/storage/test_events.py
    tests/storage/test_records.py
    tests/storage/test_vectors.py
    tests/retrieval/test_vector_cache.py
    tests/storage/test_search.py
    tests/storage/test_audit.py
    tests/storage/test_upkeep.py
    tests/storage/test_storage.py
    tests/storage/test_anchors.py
    tests/api/test_ingest.py
    tests/api/test_read.py
    tests/api/test_errors.py
    tests/extraction/test_deterministic.py
    tests/extraction/test_capture.py
)
# What the smoke tests import beyond wakemark itself, with the dev extra's version specs.
TEST_DEPS=(pytest pytest-timeout hypothesis build setuptools pyyaml)

test_requirements() {
    "$1" - "${TEST_DEPS[@]}" <<'EOF'
import re, sys, tomllib
dev = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"]
wanted = set(sys.argv[1:])
for spec in dev:
    if re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower() in wanted:
        print(spec)
EOF
}

one() {
    local py="$1" version="$2" work t0=$SECONDS
    work="$(mktemp -d "${TMPDIR:-/tmp}/wakemark-py$version.XXXXXX")"
    # one() runs in a subshell of its own; $work is expanded now (a local is gone at EXIT).
    trap "rm -rf '$work'" EXIT
    "$py" -m venv "$work/venv"
    local vpy="$work/venv/bin/python"
    # pip's own cache (~/.cache/pip) is left on: the second interpreter and the next run
    # reuse the downloaded and built wheels, so this phase is mostly install time; and no
    # byte-compiling up front: the tests import a fraction of what is installed.
    mapfile -t reqs < <(test_requirements "$vpy")
    "$vpy" -m pip install -q --no-compile "${reqs[@]}"
    "$vpy" -m build --wheel --no-isolation --outdir "$work/dist" "$ROOT" >"$work/build.log" 2>&1 \
        || { cat "$work/build.log"; return 1; }
    "$vpy" -m pip install -q --no-compile "$work"/dist/wakemark-*.whl
    # The tests import their helpers as `tests.*`: the checkout goes on sys.path after
    # site-packages (a .pth line), so `wakemark` still comes from the installed wheel.
    echo "$ROOT" >"$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/wakemark-checkout-tests.pth"
    (cd "$work" && "$vpy" -c 'import sys, wakemark; sys.exit(not wakemark.__file__.startswith(sys.prefix))') \
        || { echo "wakemark is not imported from the installed wheel"; return 1; }
    echo "venv, wheel and install: $((SECONDS - t0))s"
    # -o pythonpath= : import the installed wheel, not the checkout's wakemark/ folder.
    (cd "$ROOT" && "$work/venv/bin/pytest" -q -p no:cacheprovider -o pythonpath= \
        -m "not (postgres or redis or fuzz)" "${SMOKE[@]}")
    echo "total: $((SECONDS - t0))s"
}

pids=() names=()
while read -r py; do
    version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$version" == "$SKIP" ]] && continue
    echo "python $version: $py"
    # pip warns about every configured index it cannot use; that is not news here.
    one "$py" "$version" > >(grep --line-buffered -v "^WARNING: Location" | sed "s/^/[$version] /") 2>&1 &
    pids+=($!) names+=("$version")
done < <(scripts/find-python.sh --all)

if ((${#pids[@]} == 0)); then
    echo "no Python 3.11-3.13 other than $SKIP found: nothing to check" >&2
    exit 1
fi
failed=()
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if ((${#failed[@]})); then
    echo "python matrix failed on: ${failed[*]}" >&2
    exit 1
fi
echo "python matrix passed on: ${names[*]}"
