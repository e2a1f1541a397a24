#!/usr/bin/env bash
# Runs the escape and functional suites under the landlock sandbox as an ordinary (non-root) user, with the
# system's Python, from a world-readable copy of the built binaries: the sandbox must hold for a server that
# is not root too. Needs root (to create the user); expects `cargo test` to have built the test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
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
echo "== escape and functional suites under landlock as $user" >&2
runuser -u "$user" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="/home/$user" \
    PTC_TEST_BINARY="$work/ptc-mcp" PTC_TEST_REPO="$work" PTC_TEST_SANDBOX=landlock \
    PTC_REQUIRE_BACKENDS=landlock RUST_BACKTRACE=0 "$work/integration" escape:: --test-threads 2
