#!/usr/bin/env bash
# Runs the benchmarks (release build) and prints a Markdown table per available sandbox backend, each
# figure beside a baseline measured in the same run. Not a test: it never fails on a slow machine.
# Usage: ci/bench.sh [precheck] [sandboxes] [preload] [sessions] [soak]   (sections to run; all without any)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --locked --bench ptc "$@"
