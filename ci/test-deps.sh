#!/usr/bin/env bash
# Install the third-party MCP pieces the integration tests talk to, into one directory:
#   venv/  a Python venv with the official MCP Python SDK (`mcp`, 2.x) and `mcp-server-time`
#   packages-venv/  a Python venv with numpy and pandas only: the interpreter of execution.site_packages tests
#   npm/   @modelcontextprotocol/server-memory, @modelcontextprotocol/server-everything and
#          @modelcontextprotocol/server-filesystem
#
# Usage: ci/test-deps.sh [DIR]        (DIR defaults to <repo>/target/test-deps)
#        eval "$(ci/test-deps.sh)"    (stdout carries only the `export NAME=value` lines)
#
# Idempotent: a stamp file per part records what was installed; a second run with the same
# pins does no network access and takes well under a second. Progress goes to stderr.
#
# Exports (read by the integration tests):
#   PTC_TEST_SDK_PYTHON         the venv's python (has `mcp`); runs tests/clients/sdk_client.py
#   PTC_TEST_TIME_SERVER        the `mcp-server-time` executable (stdio server; pass
#                               `--local-timezone UTC` for a result that does not depend on the
#                               machine's /etc/localtime, /etc/timezone or TZ)
#   PTC_TEST_MEMORY_SERVER      server-memory's JS entry point, run with `node` (set
#                               MEMORY_FILE_PATH to a temp file, or it writes into DIR/npm)
#   PTC_TEST_EVERYTHING_SERVER  server-everything's JS entry point, run with `node` (stdio by default;
#                               `streamableHttp` or `sse` as its argument serves HTTP on $PORT)
#   PTC_TEST_CONFORMANCE        the official MCP conformance suite's CLI (@modelcontextprotocol/conformance),
#                               run with PTC_TEST_CONFORMANCE_NODE
#   PTC_TEST_CONFORMANCE_NODE   a Node.js 22 from the npm registry's `node` package: the suite needs Node 22+
#                               (fs.globSync), newer than many machines' (this one's is 20)
#   PTC_TEST_FILESYSTEM_SERVER  server-filesystem's JS entry point, run with `node DIR...` (the directories
#                               it may read and write)
#   PTC_TEST_FASTMCP_PYTHON     a python with FastMCP (its own venv, fastmcp-venv/); runs
#                               tests/servers/oauth_server.py, an OAuth-protected server
#   PTC_TEST_PACKAGES_PYTHON    packages-venv's python (numpy and pandas installed; nothing else), the
#                               execution.python of the execution.site_packages and preload tests
set -euo pipefail

# Pins, all verified together (Python 3.11, Node 20). mcp-server-time 2026.x requires mcp>=2.3,<3,
# so both share one venv.
MCP_VERSION=2.3.0
MCP_SERVER_TIME_VERSION=2026.10.19
SERVER_MEMORY_VERSION=2026.8.31
SERVER_EVERYTHING_VERSION=2026.8.31
CONFORMANCE_VERSION=0.1.16
CONFORMANCE_NODE_VERSION=22.23.3
SERVER_FILESYSTEM_VERSION=2026.8.31
# FastMCP's in-memory OAuth provider guards the OAuth tests' server. Its own venv: its dependencies must not
# move the pins above.
FASTMCP_VERSION=4.2.3
# numpy and pandas with their dependencies, all pinned (wheels for CPython 3.10-3.13 on Linux and macOS).
PACKAGES_PINS="numpy==2.2.6 pandas==2.2.3 python-dateutil==2.9.0.post0 pytz==2025.2 tzdata==2025.2 six==1.17.0"

log() { printf 'test-deps: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
dir=${1:-$repo_root/target/test-deps}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)  # absolute: the exports must work from any cwd

# Two concurrent runs (e.g. parallel test binaries) must not install into the same tree at once.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$dir/.lock"
    flock 9
fi

# --- Python: the official SDK and mcp-server-time ------------------------------------------
python=${PYTHON:-python3}
venv=$dir/venv
py_pins="mcp==$MCP_VERSION mcp-server-time==$MCP_SERVER_TIME_VERSION"
py_stamp=$venv/.ptc-test-deps

venv_ok() {
    [[ -f $py_stamp && $(<"$py_stamp") == "$py_pins" ]] \
        && [[ -x $venv/bin/mcp-server-time ]] \
        && "$venv/bin/python" -c '' 2>/dev/null  # the base interpreter may have gone away
}

if venv_ok; then
    log "python: $py_pins already in $venv"
else
    command -v "$python" >/dev/null 2>&1 || die "$python not found (set PYTHON=...)"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$python is $("$python" -V 2>&1); mcp $MCP_VERSION needs Python >= 3.10"
    if ! "$venv/bin/python" -c '' 2>/dev/null; then
        log "python: creating venv $venv with $("$python" -V 2>&1)"
        rm -rf "$venv"
        "$python" -m venv "$venv" >&2
    fi
    log "python: installing $py_pins"
    rm -f "$py_stamp"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$venv/bin/python" -m pip install --quiet $py_pins >&2
    "$venv/bin/python" -c 'import mcp.client, mcp_server_time' \
        || die "the venv cannot import mcp / mcp_server_time after install"
    [[ -x $venv/bin/mcp-server-time ]] || die "$venv/bin/mcp-server-time missing after install"
    printf '%s' "$py_pins" >"$py_stamp"
fi

# --- Python: FastMCP, in a venv of its own ------------------------------------------------------
fastmcp_venv=$dir/fastmcp-venv
fastmcp_pin="fastmcp==$FASTMCP_VERSION"
fastmcp_stamp=$fastmcp_venv/.ptc-test-deps

if [[ -f $fastmcp_stamp && $(<"$fastmcp_stamp") == "$fastmcp_pin" ]] && "$fastmcp_venv/bin/python" -c '' 2>/dev/null; then
    log "python: $fastmcp_pin already in $fastmcp_venv"
else
    if ! "$fastmcp_venv/bin/python" -c '' 2>/dev/null; then
        log "python: creating venv $fastmcp_venv"
        rm -rf "$fastmcp_venv"
        "$python" -m venv "$fastmcp_venv" >&2
    fi
    log "python: installing $fastmcp_pin"
    rm -f "$fastmcp_stamp"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$fastmcp_venv/bin/python" -m pip install --quiet "$fastmcp_pin" >&2
    "$fastmcp_venv/bin/python" -c 'import fastmcp.server.auth.providers.in_memory' \
        || die "the FastMCP venv cannot import fastmcp after install"
    printf '%s' "$fastmcp_pin" >"$fastmcp_stamp"
fi

# --- Python: numpy and pandas, for programs that see a venv's packages (execution.site_packages) ----------
# Made from the system's python3 where there is one (every user can run it, as ci/test-as-user.sh's user must;
# a pyenv under /root is root's alone), else from $python. Its pip is $python's, run for the venv.
packages_venv=$dir/packages-venv
packages_stamp=$packages_venv/.ptc-test-deps
packages_base=$python
if /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    packages_base=/usr/bin/python3
fi
packages_wanted="$PACKAGES_PINS (from $packages_base)"

if [[ -f $packages_stamp && $(<"$packages_stamp") == "$packages_wanted" ]] \
    && "$packages_venv/bin/python" -c 'import numpy, pandas' 2>/dev/null; then
    log "python: $packages_wanted already in $packages_venv"
else
    command -v "$python" >/dev/null 2>&1 || die "$python not found (set PYTHON=...)"
    rm -rf "$packages_venv"
    log "python: creating venv $packages_venv from $packages_base and installing $PACKAGES_PINS"
    "$packages_base" -m venv --without-pip "$packages_venv" >&2
    # Installed by the base interpreter's pip (22.3+ for --python): the venv holds the packages and nothing else.
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$python" -m pip --python "$packages_venv/bin/python" install --quiet --only-binary=:all: $PACKAGES_PINS >&2
    "$packages_venv/bin/python" -c 'import numpy, pandas' || die "the packages venv cannot import numpy and pandas"
    # Readable by everyone: the sandbox's user (nobody under a root server, ci/test-as-user.sh's user) reads it.
    chmod -R a+rX "$packages_venv"
    printf '%s' "$packages_wanted" >"$packages_stamp"
fi

# --- npm: the reference servers ------------------------------------------------------------
npm_dir=$dir/npm
npm_pins="@modelcontextprotocol/server-memory@$SERVER_MEMORY_VERSION @modelcontextprotocol/server-everything@$SERVER_EVERYTHING_VERSION"
npm_stamp=$npm_dir/.ptc-test-deps
memory_js=$npm_dir/node_modules/@modelcontextprotocol/server-memory/dist/index.js
everything_js=$npm_dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js

if [[ -f $npm_stamp && $(<"$npm_stamp") == "$npm_pins" && -f $memory_js && -f $everything_js ]]; then
    log "npm: $npm_pins already in $npm_dir"
else
    command -v npm >/dev/null 2>&1 || die "npm not found (Node.js 18+ with npm is needed)"
    command -v node >/dev/null 2>&1 || die "node not found"
    log "npm: installing $npm_pins"
    rm -f "$npm_stamp"
    mkdir -p "$npm_dir"
    # npm prints its summary on stdout: keep stdout for the exports only.
    npm install --prefix "$npm_dir" --no-audit --no-fund --save-exact $npm_pins >&2
    [[ -f $memory_js ]] || die "$memory_js missing after install"
    [[ -f $everything_js ]] || die "$everything_js missing after install"
    printf '%s' "$npm_pins" >"$npm_stamp"
fi

# server-filesystem has its own stamp: adding it leaves the install above (and its stamp) as it was.
filesystem_pin="@modelcontextprotocol/server-filesystem@$SERVER_FILESYSTEM_VERSION"
filesystem_stamp=$npm_dir/.ptc-test-deps-filesystem
filesystem_js=$npm_dir/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js

if [[ -f $filesystem_stamp && $(<"$filesystem_stamp") == "$filesystem_pin" && -f $filesystem_js ]]; then
    log "npm: $filesystem_pin already in $npm_dir"
else
    log "npm: installing $filesystem_pin"
    rm -f "$filesystem_stamp"
    npm install --prefix "$npm_dir" --no-audit --no-fund --save-exact "$filesystem_pin" >&2
    [[ -f $filesystem_js ]] || die "$filesystem_js missing after install"
    printf '%s' "$filesystem_pin" >"$filesystem_stamp"
fi

# --- npm: the conformance suite, with the Node.js it needs -----------------------------------
conformance_dir=$dir/conformance
conformance_pins="@modelcontextprotocol/conformance@$CONFORMANCE_VERSION node@$CONFORMANCE_NODE_VERSION"
conformance_stamp=$conformance_dir/.ptc-test-deps
conformance_js=$conformance_dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
conformance_node=$conformance_dir/node_modules/.bin/node

if [[ -f $conformance_stamp && $(<"$conformance_stamp") == "$conformance_pins" && -f $conformance_js ]] \
    && "$conformance_node" --version >/dev/null 2>&1; then
    log "npm: $conformance_pins already in $conformance_dir"
else
    command -v npm >/dev/null 2>&1 || die "npm not found (Node.js 18+ with npm is needed)"
    log "npm: installing $conformance_pins"
    rm -f "$conformance_stamp"
    mkdir -p "$conformance_dir"
    # The `node` package's install script fetches its platform's binary package from the npm registry.
    npm install --prefix "$conformance_dir" --no-audit --no-fund --save-exact $conformance_pins >&2
    [[ -f $conformance_js ]] || die "$conformance_js missing after install"
    "$conformance_node" --version >/dev/null 2>&1 || die "$conformance_node does not run after install"
    printf '%s' "$conformance_pins" >"$conformance_stamp"
fi

# --- the environment the tests read ---------------------------------------------------------
printf 'export %s=%q\n' \
    PTC_TEST_SDK_PYTHON "$venv/bin/python" \
    PTC_TEST_TIME_SERVER "$venv/bin/mcp-server-time" \
    PTC_TEST_MEMORY_SERVER "$memory_js" \
    PTC_TEST_EVERYTHING_SERVER "$everything_js" \
    PTC_TEST_CONFORMANCE "$conformance_js" \
    PTC_TEST_CONFORMANCE_NODE "$conformance_node" \
    PTC_TEST_FILESYSTEM_SERVER "$filesystem_js" \
    PTC_TEST_FASTMCP_PYTHON "$fastmcp_venv/bin/python" \
    PTC_TEST_PACKAGES_PYTHON "$packages_venv/bin/python"
