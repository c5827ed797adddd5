#!/bin/sh
# Print a Python 3.11-3.13 interpreter: `python3` if it is one, else the newest
# python3.1x on PATH, else pyenv's. With --all: one interpreter per minor version found.
# Each candidate is run, not trusted by name: pyenv shims exist for versions not enabled.
set -u
all=0
[ "${1:-}" = "--all" ] && all=1
pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
seen=""
for candidate in python3 python3.13 python3.12 python3.11 \
    "$pyenv_root"/versions/3.13*/bin/python3.13 \
    "$pyenv_root"/versions/3.12*/bin/python3.12 \
    "$pyenv_root"/versions/3.11*/bin/python3.11; do
    minor=$("$candidate" -c 'import sys; v = sys.version_info; print(v.minor if v[:2] >= (3, 11) and v[:2] <= (3, 13) else "")' 2>/dev/null) || continue
    [ -n "$minor" ] || continue
    case " $seen " in *" $minor "*) continue ;; esac
    seen="$seen $minor"
    path=$(command -v "$candidate")
    echo "$path"
    [ "$all" = 1 ] || exit 0
done
[ -n "$seen" ] || { echo "no Python 3.11, 3.12 or 3.13 found on PATH or in pyenv" >&2; exit 1; }
