#!/usr/bin/env bash
# Runs the escape and functional suites under the landlock sandbox as an ordinary (non-root) user, with the
# system's Python, from a world-readable copy of the built binaries: the sandbox must hold for a server that
# is not root too. Needs root (to create the user); expects `cargo test` to have built the test binaries.
#
# Usage: ci/test-as-user.sh [namespaces|degraded]   (default: namespaces)
#   namespaces  the user can create user namespaces: the sandbox's full mode;
#   degraded    the user runs inside a user namespace of its own whose user.max_user_namespaces is 0, so the
#               sandbox cannot create one and runs degraded (opted in with execution.allow_degraded). Only
#               that namespace's limit changes: other runs on the machine keep theirs.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-namespaces}
[[ $mode == namespaces || $mode == degraded ]] || { echo "usage: $0 [namespaces|degraded]" >&2; exit 2; }
user=ptc-test-user
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
work=$(mktemp -d /tmp/ptc-as-user.XXXXXX)
trap 'rm -rf "$work"' EXIT
test_binary=$(ls -t target/debug/deps/integration-* | grep -v '\.d$' | head -n 1)
mkdir -p "$work/tests"
cp target/debug/ptc-mcp "$work/ptc-mcp"
cp "$test_binary" "$work/integration"
cp -r tests/servers "$work/tests/servers"
chmod -R a+rX "$work"

# Runs "$@" in a new user namespace (ids mapped one to one) whose user.max_user_namespaces is 0. The map is
# written from outside (no newuidmap needed); the inner shell execs once mapped, so it is root in its namespace
# and may lower the limit, then the command drops to the test user.
without_user_namespaces() {
    local fifo pid
    fifo=$(mktemp -u "$work/go.XXXXXX")
    mkfifo "$fifo"
    unshare --user -- sh -c 'read _ <"$0"; exec sh -c "echo 0 >/proc/sys/user/max_user_namespaces && exec \"\$@\"" sh "$@"' \
        "$fifo" "$@" &
    pid=$!
    # Until unshare has made the namespace (and while it execs the shell) the maps cannot be written yet.
    local mapped=
    for _ in $(seq 1 200); do
        if [[ $(readlink "/proc/$pid/ns/user") != $(readlink /proc/self/ns/user) ]] &&
            { echo "0 0 65536" >"/proc/$pid/uid_map"; } 2>/dev/null; then
            mapped=yes
            break
        fi
        sleep 0.05
    done
    [[ -n $mapped ]] || { echo "ci/test-as-user.sh: could not map the ids of the test's user namespace" >&2; exit 1; }
    echo "0 0 65536" >"/proc/$pid/gid_map"
    echo go >"$fifo"
    wait "$pid"
}

# The packages tests need ci/test-deps.sh's venv (made from the system's python3, which every user can run);
# they skip, saying so, without it.
packages=()
if [[ -n ${PTC_TEST_PACKAGES_PYTHON:-} ]]; then packages=(PTC_TEST_PACKAGES_PYTHON="$PTC_TEST_PACKAGES_PYTHON"); fi
as_user=(setpriv --reuid "$user" --regid "$user" --init-groups env -i PATH=/usr/local/bin:/usr/bin:/bin
    HOME="/home/$user" PTC_TEST_BINARY="$work/ptc-mcp" PTC_TEST_REPO="$work" PTC_TEST_SANDBOX=landlock
    PTC_TEST_LANDLOCK_MODE="$mode" PTC_REQUIRE_BACKENDS=landlock RUST_BACKTRACE=0 "${packages[@]}"
    "$work/integration" escape:: mounts:: packages:: --test-threads 2)
echo "== escape, mounts and packages suites under landlock ($mode) as $user" >&2
if [[ $mode == degraded ]]; then
    without_user_namespaces "${as_user[@]}"
else
    "${as_user[@]}"
fi
