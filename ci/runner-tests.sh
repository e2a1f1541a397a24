#!/usr/bin/env bash
# The embedded runner's own tests (backends/tests) on every CPython 3.9+ this machine has: python3 on PATH,
# python3.N on PATH, and pyenv's versions. The runner must work on each version the README promises.
# Usage: ci/runner-tests.sh           (PTC_RUNNER_PYTHONS="py1 py2" to name the interpreters instead)
set -euo pipefail
cd "$(dirname "$0")/.."

candidates=${PTC_RUNNER_PYTHONS:-}
if [[ -z $candidates ]]; then
    candidates="python3 $(compgen -c python3. | grep -E '^python3\.[0-9]+$' | sort -u | tr '\n' ' ')"
    for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin; do
        [[ -x $dir/python3 ]] && candidates+=" $dir/python3"
    done
fi

declare -A seen=()
tested=()
for python in $candidates; do
    command -v "$python" >/dev/null 2>&1 || continue
    # The real interpreter and its version; one interpreter per version is enough.
    read -r real version < <("$python" -I -S -c \
        'import os, sys; print(os.path.realpath(sys.executable), "%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
    [[ -n ${seen[$version]:-} ]] && continue
    seen[$version]=1
    "$python" -I -S -c 'import sys; sys.exit(sys.version_info < (3, 9))' || continue
    echo "== runner tests on Python $version ($real)" >&2
    "$real" -m unittest discover -s backends/tests
    tested+=("$version")
done
[[ ${#tested[@]} -gt 0 ]] || { echo "ci/runner-tests.sh: no Python 3.9+ found" >&2; exit 1; }
echo "runner tests passed on Python ${tested[*]}" >&2
