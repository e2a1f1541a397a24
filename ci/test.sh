#!/usr/bin/env bash
# The project's whole test suite: the embedded runner's own tests, then every Rust test (unit and
# integration). Third-party test servers come from ci/test-deps.sh; without them those tests skip and say why.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m unittest discover -s backends/tests
cargo test --workspace --locked --lib --bins --tests "$@"
