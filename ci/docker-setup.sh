#!/usr/bin/env bash
# A Docker engine and a runner image for the `docker` sandbox tests, on a machine that reaches no image
# registry. Idempotent:
#   1. installs Debian's docker.io if `dockerd` is missing, and runsc (gVisor) if it is missing;
#   2. registers runsc as the engine's OCI runtime `runsc` (merged into /etc/docker/daemon.json, or
#      $PTC_DOCKER_DAEMON_JSON; other keys kept), with `--network=none` as a runtime argument (runs have no
#      network, and runsc's own network setup fails on machines without a bridge); a running engine reloads it
#      on SIGHUP (it is never restarted: other runs may be using it);
#   3. starts dockerd in the background (log: $PTC_DOCKERD_LOG, default /var/log/ptc-dockerd.log) if the
#      engine does not answer, and waits for it; no bridge network and no iptables rules (runs use
#      network none);
#   4. builds the image ptc-mcp-runner:local (or $PTC_RUNNER_IMAGE) with `docker import` from this machine's
#      own python3: the interpreter at its real path (plus a /usr/local/bin/python3 link), its standard
#      library without site-packages, tests, tkinter, idle and the static library, the shared libraries it
#      and its extension modules need (from ldd), the dynamic loader and /usr/share/zoneinfo. No /etc at all
#      (no user database: containers run as a numeric non-root uid), no shell, no other program.
#      The image is rebuilt only when its inputs changed (a label holds their digest).
#   5. with PTC_RUNNER_PACKAGES_PYTHON (a venv's python), also ptc-mcp-runner:packages (or
#      $PTC_RUNNER_PACKAGES_IMAGE): the same image with that venv's packages (numpy, pandas) installed.
# Progress goes to stderr; the last line on stdout names the image.
# Usage: ci/docker-setup.sh            (needs root for the install and for starting dockerd)
set -euo pipefail

image=${PTC_RUNNER_IMAGE:-ptc-mcp-runner:local}
log_file=${PTC_DOCKERD_LOG:-/var/log/ptc-dockerd.log}
python=${PYTHON:-python3}

log() { printf 'docker-setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- 1. the engine's packages ----------------------------------------------------------------
packages=()
command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)
command -v runsc >/dev/null 2>&1 || packages+=(runsc)
if ((${#packages[@]})); then
    log "installing ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${packages[@]}" >&2
fi
# Debian's client; another `docker` earlier on PATH may be too new for this engine's API.
docker=/usr/bin/docker
[[ -x $docker ]] || docker=$(command -v docker) || die "no docker client after installing docker.io"

# --- 2. runsc as an OCI runtime of the engine -------------------------------------------------
daemon_json=${PTC_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
runsc=$(command -v runsc) || die "no runsc after installing it"
mkdir -p "$(dirname "$daemon_json")"
# Prints "changed" when the file had to change.
registered=$("$python" -I -S - "$daemon_json" "$runsc" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
config = {}
if os.path.exists(path):
    with open(path) as f:
        text = f.read()
    config = json.loads(text) if text.strip() else {}
wanted = {"path": runsc, "runtimeArgs": ["--network=none"]}
if config.get("runtimes", {}).get("runsc") != wanted:
    config.setdefault("runtimes", {})["runsc"] = wanted
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print("changed")
PY
)
if [[ $registered == changed ]]; then
    log "registered runsc ($runsc) in $daemon_json"
    # A running engine reads its runtimes again on SIGHUP; one started below reads the file anyway.
    if pid=$(pidof dockerd); then kill -HUP $pid; fi
fi

# --- 3. the engine ---------------------------------------------------------------------------
if ! "$docker" version >/dev/null 2>&1; then
    log "starting dockerd (log: $log_file)"
    mkdir -p "$(dirname "$log_file")"
    # setsid: the engine must outlive this script's session (CI runs the tests after it returns).
    setsid dockerd --bridge=none --iptables=false --ip6tables=false >>"$log_file" 2>&1 </dev/null &
    for _ in $(seq 1 120); do
        "$docker" version >/dev/null 2>&1 && break
        sleep 0.5
    done
    "$docker" version >/dev/null 2>&1 || { tail -20 "$log_file" >&2; die "dockerd did not come up within 60 s"; }
fi
log "engine: $("$docker" version --format 'Docker {{.Server.Version}} (API {{.Server.APIVersion}})')"
# A reload after SIGHUP is not instant.
for _ in $(seq 1 40); do
    [[ $("$docker" info --format '{{json .Runtimes}}') == *'"runsc"'* ]] && break
    sleep 0.25
done
[[ $("$docker" info --format '{{json .Runtimes}}') == *'"runsc"'* ]] \
    || die "the engine does not list the runsc runtime after reading $daemon_json (does dockerd use another file?)"

# --- 4. the runner image -----------------------------------------------------------------------
command -v "$python" >/dev/null 2>&1 || die "$python not found (set PYTHON=...)"
# The real interpreter, not a PATH shim (pyenv's are shell scripts).
read -r executable stdlib platstdlib version < <("$python" -I -S -c \
    'import sys, sysconfig; print(sys.executable, sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"), "%d.%d" % sys.version_info[:2])')
executable=$(readlink -f "$executable")
[[ -x $executable ]] || die "cannot resolve the interpreter behind $python"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root"

# Copies a path (file or directory, keeping symlinks in it) to the same place in the image.
copy() { (cd / && cp -a --parents "${1#/}" "$root"); }
# A library by its name in its canonical directory (/lib may be a link to /usr/lib) and the file that
# name leads to, so the loader finds it under the name it looks for.
copy_library() {
    local name
    name=$(readlink -f "$(dirname "$1")")/$(basename "$1")
    copy "$name"
    local real
    real=$(readlink -f "$name")
    [[ $real == "$name" ]] || copy "$real"
}

# The top-level links of a merged /usr (/lib -> usr/lib, ...), as links, so every path names the same file.
for top in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [[ -L $top ]]; then cp -a "$top" "$root$top"; fi
done

copy "$executable"
for dir in "$stdlib" "$platstdlib"; do
    [[ -d $root$dir ]] && continue
    # What programs never need and what would only bloat the image (tkinter would also need X11).
    mkdir -p "$root$dir"
    tar -C "$dir" -c \
        --exclude='./site-packages' --exclude='./dist-packages' --exclude='./test' --exclude='*/tests' \
        --exclude='*/test' --exclude='./idlelib' --exclude='./tkinter' --exclude='./turtledemo' \
        --exclude='./ensurepip' --exclude='./config-*' --exclude='_tkinter*' --exclude='./lib2to3' \
        --exclude='./__phello__' --exclude='*.opt-1.pyc' --exclude='*.opt-2.pyc' . | tar -C "$root$dir" -x
done

# Shared libraries of the interpreter and of every extension module, and the loader.
libraries() {
    ldd "$@" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
}
mapfile -t objects < <(find "$root$platstdlib" "$root$stdlib" -name '*.so' | sed "s|^$root||")
mapfile -t libs < <(libraries "$executable" "${objects[@]}" | sort -u)
for lib in "${libs[@]}"; do
    copy_library "$lib"
done
# The loader by the path programs name (/lib64/ld-linux-x86-64.so.2 is a link on most systems); ldd
# lists it too, readelf is only a second opinion.
if command -v readelf >/dev/null 2>&1; then
    loader=$(readelf -l "$executable" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    if [[ -n $loader ]]; then copy_library "$loader"; fi
fi
if [[ -d /usr/share/zoneinfo ]]; then copy /usr/share/zoneinfo; fi

# What the image is made of (before stripping, which changes every file's time).
digest=$( (cd "$root" && find . ! -type d -printf '%p %s %T@ %l\n' | LC_ALL=C sort) | sha256sum | cut -c1-16)
# Debug information is most of libpython's size and no use here.
if command -v strip >/dev/null 2>&1; then
    find "$root" -type f \( -name '*.so' -o -name '*.so.*' \) -exec strip --strip-debug {} + 2>/dev/null || true
    strip --strip-debug "$root$executable" 2>/dev/null || true
fi

mkdir -p "$root/usr/local/bin"
[[ -e $root/usr/local/bin/python3 ]] || ln -s "$executable" "$root/usr/local/bin/python3"

# Imports the tree $2 as image $1, unless the image's label already holds the digest $3 of its inputs.
import_image() {
    local name=$1 tree=$2 inputs=$3
    if [[ $("$docker" image inspect --format '{{index .Config.Labels "ptc-mcp.inputs"}}' "$name" 2>/dev/null) == "$inputs" ]]; then
        log "image $name is up to date (inputs $inputs)"
        return
    fi
    log "building $name from $executable (Python $version)"
    # Everything owned by root; directories traversable by anyone (a home like /root is 0700 on the host).
    tar -C "$tree" -c --owner=0 --group=0 --numeric-owner --mode='u+w,go-w,a+rX' --sort=name . \
        | "$docker" import \
            --change 'CMD ["/usr/local/bin/python3"]' \
            --change "LABEL ptc-mcp.inputs=$inputs" \
            --change "LABEL ptc-mcp.python=$executable" \
            --message "ptc-mcp runner image from the machine's own Python $version" \
            - "$name" >/dev/null
}
import_image "$image" "$root" "$digest"
size=$("$docker" image inspect --format '{{.Size}}' "$image")
log "image $image: Python $version at $executable (also /usr/local/bin/python3), $((size / 1024 / 1024)) MiB"
"$docker" run --rm --network none --read-only --user 65534:65534 "$image" /usr/local/bin/python3 -I -S -c \
    'import sys, ctypes, sqlite3, zoneinfo, ssl; print("docker-setup: python", sys.version.split()[0], "works in the image")' >&2
"$docker" run --rm --runtime runsc --network none --read-only --user 65534:65534 "$image" /usr/local/bin/python3 -I -S -c \
    'import os; print("docker-setup: python works in the image under runsc (kernel %s)" % os.uname().release)' >&2

# --- 5. a runner image with packages (optional) -------------------------------------------------
# With PTC_RUNNER_PACKAGES_PYTHON (a virtualenv's python of the same base interpreter, e.g. ci/test-deps.sh's
# packages venv), the image $PTC_RUNNER_PACKAGES_IMAGE (default ptc-mcp-runner:packages): the runner image
# plus that venv's installed packages in the interpreter's own site-packages (what execution.site_packages
# shows programs under docker), with their compiled bytecode (the image is read-only: without it every import
# compiles from source), and the shared libraries their extension modules need (from ldd).
if [[ -n ${PTC_RUNNER_PACKAGES_PYTHON:-} ]]; then
    packages_image=${PTC_RUNNER_PACKAGES_IMAGE:-ptc-mcp-runner:packages}
    venv_site=$("$PTC_RUNNER_PACKAGES_PYTHON" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    image_site=$("$executable" -I -S -c 'import site; print(site.getsitepackages()[0])')
    [[ -d $venv_site ]] || die "PTC_RUNNER_PACKAGES_PYTHON=$PTC_RUNNER_PACKAGES_PYTHON has no site-packages"
    packages_root=$stage/packages
    cp -al "$root" "$packages_root"
    root=$packages_root # copy and copy_library write here from now on
    mkdir -p "$root$image_site"
    tar -C "$venv_site" -c --exclude='./pip' --exclude='./pip-*' --exclude='./_distutils_hack' \
        --exclude='./setuptools*' --exclude='./pkg_resources' . | tar -C "$root$image_site" -x
    mapfile -t objects < <(find "$root$image_site" -name '*.so*' -type f)
    mapfile -t package_libs < <(libraries "${objects[@]}" | grep -v "^$root" | sort -u)
    for lib in "${package_libs[@]}"; do
        copy_library "$lib"
    done
    packages_digest=$( (echo "$digest"; cd "$root$image_site" && find . ! -type d -printf '%p %s\n' | LC_ALL=C sort;
        printf '%s\n' "${package_libs[@]}") | sha256sum | cut -c1-16)
    import_image "$packages_image" "$root" "$packages_digest"
    "$docker" run --rm --network none --read-only --user 65534:65534 "$packages_image" /usr/local/bin/python3 -I -c \
        'import numpy, pandas; print("docker-setup: numpy", numpy.__version__, "and pandas", pandas.__version__, "work in the packages image")' >&2
fi
echo "$image"
