#!/usr/bin/env bash
# The project's whole test suite: the embedded runner's own tests, every Rust test (unit tests and the
# integration binary, with programs in the `none` sandbox), then the integration binary again under each
# real sandbox in PTC_TEST_SANDBOXES (default: landlock; CI: "landlock docker docker:runsc") that works here;
# `docker:RUNTIME` is the docker sandbox with that OCI runtime (runsc: gVisor). A sandbox that does not work
# is skipped with the reason, unless PTC_REQUIRE_BACKENDS names it; then the run fails.
# Third-party test servers come from ci/test-deps.sh; without them those tests skip and say why. Everything is
# built with the kubernetes backend (--features kubernetes), whose tests run against a fake API server.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/runner-tests.sh
cargo test --workspace --locked --features kubernetes --lib --bins --tests "$@"
# The docker sandbox runs the runner image ci/docker-setup.sh builds (PTC_TEST_DOCKER_IMAGE to change it).
check_config=$(mktemp)
trap 'rm -f "$check_config"' EXIT
for sandbox in ${PTC_TEST_SANDBOXES:-landlock}; do
    kind=${sandbox%%:*}
    runtime=
    if [[ $sandbox == *:* ]]; then runtime=${sandbox#*:}; fi
    printf 'execution:\n  docker:\n    image: %s\n' "${PTC_TEST_DOCKER_IMAGE:-ptc-mcp-runner:local}" >"$check_config"
    if [[ -n $runtime ]]; then printf '    runtime: %s\n' "$runtime" >>"$check_config"; fi
    if check=$(target/debug/ptc-mcp --check-sandbox "$kind" --config "$check_config"); then
        check=${check%%$'\n'*} # the first line: what is in force (the guarantees follow)
        echo "== integration tests under the $sandbox sandbox ($check)" >&2
        PTC_TEST_SANDBOX="$kind" PTC_TEST_DOCKER_RUNTIME="$runtime" cargo test --locked --features kubernetes --test integration "$@"
    elif [[ ",${PTC_REQUIRE_BACKENDS:-}," == *",$sandbox,"* ]]; then
        echo "ci/test.sh: the $sandbox sandbox is required (PTC_REQUIRE_BACKENDS) but unavailable: $check" >&2
        exit 1
    else
        echo "SKIPPED: integration tests under the $sandbox sandbox: $check" >&2
    fi
done
