#!/usr/bin/env bash
# The project's whole test suite: the embedded runner's own tests, every Rust test (unit tests and the
# integration binary, with programs in the `none` sandbox), then the integration binary again under each
# real sandbox in PTC_TEST_SANDBOXES (default: landlock; CI: "landlock docker") that works here. A sandbox
# that does not work is skipped with the reason, unless PTC_REQUIRE_BACKENDS names it; then the run fails.
# Third-party test servers come from ci/test-deps.sh; without them those tests skip and say why.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/runner-tests.sh
cargo test --workspace --locked --lib --bins --tests "$@"
# The docker sandbox runs the runner image ci/docker-setup.sh builds (PTC_TEST_DOCKER_IMAGE to change it).
check_config=$(mktemp)
trap 'rm -f "$check_config"' EXIT
printf 'execution:\n  docker:\n    image: %s\n' "${PTC_TEST_DOCKER_IMAGE:-ptc-mcp-runner:local}" >"$check_config"
for sandbox in ${PTC_TEST_SANDBOXES:-landlock}; do
    if check=$(target/debug/ptc-mcp --check-sandbox "$sandbox" --config "$check_config"); then
        check=${check%%$'\n'*} # the first line: what is in force (the guarantees follow)
        echo "== integration tests under the $sandbox sandbox ($check)" >&2
        PTC_TEST_SANDBOX="$sandbox" cargo test --locked --test integration "$@"
    elif [[ ",${PTC_REQUIRE_BACKENDS:-}," == *",$sandbox,"* ]]; then
        echo "ci/test.sh: the $sandbox sandbox is required (PTC_REQUIRE_BACKENDS) but unavailable: $check" >&2
        exit 1
    else
        echo "SKIPPED: integration tests under the $sandbox sandbox: $check" >&2
    fi
done
