#!/usr/bin/env bash
# Build, or reuse from the cache, what scripts/test-arm.sh runs ARM Python in. No root install,
# no binfmt registration, nothing outside the cache directory is written:
#
#   scripts/arm/sysroot.sh qemu      qemu-user-static from Debian (apt-get download + dpkg -x)
#   scripts/arm/sysroot.sh aarch64   64-bit Raspberry Pi OS: bookworm's python3.11, a venv,
#                                    numpy/scipy/msgpack as PyPI's manylinux aarch64 wheels
#   scripts/arm/sysroot.sh armhf     32-bit Raspberry Pi OS: bookworm's python3.11 with
#                                    python3-numpy, python3-scipy, python3-msgpack, and a venv
#                                    with --system-site-packages
#
# An arch's directory (printed on stdout when ready) holds:
#   root/                      Debian bookworm packages of that arch, resolved by apt-get with a
#                              per-arch APT_CONFIG and an empty dpkg status, unpacked by dpkg -x;
#                              the BLAS/LAPACK alternatives' symlinks made by hand
#   root/usr/bin/python3-qemu  the wrapper: qemu-ARCH-static -L root -0 "$0" python3.11, so that
#                              sys.executable is the wrapper and child processes start too
#   venv/                      `python3 -m venv` as a Pi user makes it (run under emulation), with
#                              the project's runtime dependencies (pyproject.toml) put in by this
#                              machine's pip for the Pi's platform (--platform, --only-binary)
#   testdeps/                  pytest, hypothesis, ... (pure Python; PYTHONPATH of the test run)
#   versions.txt               what was installed
# Cache: $EDGE_ARM_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/edge-runtime-arm; an arch's
# directory is keyed by the arch, its package lists and pyproject.toml's requirements.
#
# Exit 0: ready. Exit 3: not available on this machine (no apt-get/dpkg, a download failed, too
# little disk, emulation does not start), with one line on stderr saying why. Other: a failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${EDGE_ARM_CACHE:-${XDG_CACHE_HOME:-${HOME:-${TMPDIR:-/tmp}}/.cache}/edge-runtime-arm}
VERSION=1  # bump when what is built changes in a way the key below does not see
SUITE=bookworm

unavailable() { echo "arm-sysroot: $*" >&2; exit 3; }
log() { echo "arm-sysroot: $*" >&2; }

arch=${1:?usage: scripts/arm/sysroot.sh qemu|aarch64|armhf}
for tool in apt-get dpkg dpkg-deb flock; do
  command -v "$tool" >/dev/null 2>&1 || unavailable "$tool not found (needs a Debian machine)"
done
mkdir -p "$cache" || unavailable "cannot create the cache directory $cache"

# ------------------------------------------------------------------ apt for one Debian arch
# The Debian mirrors this machine's apt uses (no host names written here), bookworm suites.
debian_sources() {  # DEBARCH
  local uri release seen=""
  while read -r uri release; do
    case "$release" in
      *-security) line="$uri $SUITE-security" ;;
      *-updates|*-backports|*-proposed-updates) continue ;;
      *) line="$uri $SUITE
$uri $SUITE-updates" ;;
    esac
    case "$seen" in *"$line"*) continue ;; esac
    seen="$seen
$line"
  done < <(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE)' \
             'Identifier: Packages' 2>/dev/null \
           | grep -E ' (bookworm|trixie|forky|bullseye|sid|stable|testing|unstable|oldstable)(-[a-z-]+)?$' \
           | sort -u)
  [ -n "$seen" ] || return 1
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  printf '%s\n' "$seen" | sed '/^$/d' | while read -r uri suite; do
    echo "deb [arch=$1 signed-by=$keyring] $uri $suite main"
  done
}

apt_setup() {  # DEBARCH -> sets APT_CONFIG for that arch (index fetched once per cache)
  local debarch=$1 d="$cache/apt-$1"
  mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/etc/apt.conf.d" \
    "$d/etc/preferences.d" "$d/etc/sources.list.d"
  : > "$d/status"
  debian_sources "$debarch" > "$d/etc/sources.list.new" \
    || unavailable "this machine's apt names no Debian package source"
  mv "$d/etc/sources.list.new" "$d/etc/sources.list"
  cat > "$d/apt.conf" <<EOF
APT::Architecture "$debarch";
APT::Architectures { "$debarch"; };
APT::Install-Recommends "false";
APT::Sandbox::User "root";
Acquire::Languages "none";
Debug::NoLocking "true";
Dir::State "$d";
Dir::State::lists "$d/lists";
Dir::State::status "$d/status";
Dir::Cache "$d";
Dir::Cache::archives "$d/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Dir::Etc "$d/etc";
Dir::Etc::SourceList "$d/etc/sources.list";
Dir::Etc::SourceParts "$d/etc/sources.list.d";
Dir::Etc::Parts "$d/etc/apt.conf.d";
Dir::Etc::PreferencesParts "$d/etc/preferences.d";
Dir::Etc::TrustedParts "/etc/apt/trusted.gpg.d";
EOF
  export APT_CONFIG="$d/apt.conf"
  # A partial failure (a mirror syncing one index) is tolerated: resolving says if it matters.
  apt-get update -qq >"$d/update.log" 2>&1 || true
  if [ -z "$(find "$d/lists" -name '*_binary-'"$debarch"'_Packages*' -print -quit)" ]; then
    unavailable "apt-get update for $debarch failed: $(grep -m1 '^[EW]:' "$d/update.log" || tail -n 1 "$d/update.log")"
  elif grep -q '^[EW]:' "$d/update.log"; then
    log "apt-get update for $debarch: $(grep -m1 '^[EW]:' "$d/update.log" | cut -c1-160) (the other indexes are used)"
  fi
}

# ------------------------------------------------------------------------------------ qemu
qemu_dir="$cache/qemu-v$VERSION"
build_qemu() {
  [ -f "$qemu_dir/.complete" ] && return 0
  rm -rf "$qemu_dir"; mkdir -p "$qemu_dir/deb"
  # This machine's own apt lists first; without them, an index of our own for its arch.
  if ! (cd "$qemu_dir/deb" && apt-get download -qq qemu-user-static >/dev/null 2>&1); then
    apt_setup "$(dpkg --print-architecture)"
    (cd "$qemu_dir/deb" && apt-get download -qq qemu-user-static >/dev/null 2>&1) \
      || unavailable "apt-get download qemu-user-static failed"
  fi
  dpkg-deb --fsys-tarfile "$qemu_dir"/deb/qemu-user-static_*.deb \
    | tar -x -C "$qemu_dir" ./usr/bin/qemu-aarch64-static ./usr/bin/qemu-arm-static
  basename "$qemu_dir"/deb/qemu-user-static_*.deb > "$qemu_dir/version.txt"
  rm -rf "$qemu_dir/deb"
  touch "$qemu_dir/.complete"
}

exec 9>"$cache/.lock-$arch"
flock 9
if [ "$arch" = qemu ]; then
  build_qemu
  echo "$qemu_dir"
  exit 0
fi

# --------------------------------------------------------------------------- one ARM arch
case "$arch" in
  aarch64)
    debarch=arm64 triplet=aarch64-linux-gnu qemu=qemu-aarch64-static cpu=cortex-a72
    # What a 64-bit Pi OS has; numpy/scipy/msgpack come from PyPI into the venv.
    debs="python3.11 python3-venv libstdc++6"
    pip_platforms=(manylinux2014_aarch64)
    for v in $(seq 36 -1 17); do pip_platforms+=("manylinux_2_${v}_aarch64"); done
    from_debian=""
    ;;
  armhf)
    debarch=armhf triplet=arm-linux-gnueabihf qemu=qemu-arm-static cpu=cortex-a7
    # What a 32-bit Pi OS user installs: `apt install python3-numpy python3-scipy python3-msgpack`.
    debs="python3.11 python3-venv libstdc++6 python3-numpy python3-scipy python3-msgpack"
    pip_platforms=(linux_armv7l manylinux2014_armv7l)
    for v in $(seq 36 -1 17); do pip_platforms+=("manylinux_2_${v}_armv7l"); done
    from_debian="numpy,scipy,msgpack"
    ;;
  *) echo "arm-sysroot: unknown arch $arch (qemu, aarch64 or armhf)" >&2; exit 2 ;;
esac

# A host Python >= 3.11 (tomllib) with pip: the repository's .venv when there is one.
hostpy=""
for candidate in "$repo/.venv/bin/python" python3.11 python3; do
  if "$candidate" -c 'import sys, tomllib, pip; assert sys.version_info >= (3, 11)' \
      >/dev/null 2>&1; then
    hostpy=$candidate; break
  fi
done
[ -n "$hostpy" ] || unavailable "no Python >= 3.11 with pip on this machine to fetch the wheels"

runtime_reqs=$("$hostpy" "$here/requirements.py" runtime --without "$from_debian")
test_reqs=$("$hostpy" "$here/requirements.py" test)
key=$(printf '%s\n' "$VERSION" "$arch" "$SUITE" "$debs" "${pip_platforms[*]}" "$runtime_reqs" \
        "$test_reqs" | sha256sum | cut -c1-12)
dir="$cache/$arch-$key"
if [ -f "$dir/.complete" ]; then
  echo "$dir"
  exit 0
fi

avail_mb=$(df -Pm "$cache" | awk 'NR == 2 { print $4 }')
[ "${avail_mb:-0}" -ge 1500 ] || unavailable "only ${avail_mb} MB free in $cache (1500 needed)"
build_qemu
log "building $dir (cache key: $arch, Debian $SUITE packages [$debs], pyproject.toml requirements)"
rm -rf "$dir"
mkdir -p "$dir/root"

# The wheels (network-bound) are fetched while apt works: runtime dependencies into a folder
# moved into the venv below, test tools into testdeps/.
pip_target() {  # LOG TARGET REQUIREMENT...
  local log=$1 target=$2; shift 2
  local plat=()
  for p in "${pip_platforms[@]}"; do plat+=(--platform "$p"); done
  "$hostpy" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$target" --upgrade "${plat[@]}" --python-version 3.11 --implementation cp \
    --abi cp311 --abi abi3 --only-binary=:all: "$@" > "$log" 2>&1 || return 1
  rm -rf "$target/bin"  # console scripts with this machine's interpreter in their #! line
}
pip_failed() {  # LOG WHAT
  unavailable "pip could not get $2: $(grep -m1 -i 'error' "$1" || tail -n 1 "$1")"
}
# shellcheck disable=SC2086
pip_target "$dir/pip-runtime.log" "$dir/runtime" $runtime_reqs &
pip_runtime=$!
# shellcheck disable=SC2086
pip_target "$dir/pip-test.log" "$dir/testdeps" $test_reqs &
pip_test=$!
trap 'kill "$pip_runtime" "$pip_test" 2>/dev/null || true' EXIT

# Debian packages: resolve with an empty dpkg status (so every dependency comes), download, unpack.
apt_setup "$debarch"
rm -f "$cache/apt-$debarch/archives/"*.deb.partial
# shellcheck disable=SC2086
apt-get install --download-only -y -qq $debs > "$dir/apt.log" 2>&1 || {
  grep -q 'Unable to locate\|unmet dependencies\|Unable to correct' "$dir/apt.log" \
    && { cat "$dir/apt.log" >&2; exit 1; }
  unavailable "downloading Debian $debarch packages failed: $(grep -m1 '^E:' "$dir/apt.log" || tail -n 1 "$dir/apt.log")"
}
# The packages of this resolution (the archive may hold older versions from earlier builds).
# shellcheck disable=SC2086
apt-get install -s -qq $debs 2>/dev/null \
  | sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) [^[]*\[\([^]]*\)\]).*$/\1_\2_\3.deb/p' \
  | sed 's/:/%3a/' > "$dir/debs.txt"
[ -s "$dir/debs.txt" ] || { cat "$dir/apt.log" >&2; exit 1; }
while read -r deb; do
  dpkg -x "$cache/apt-$debarch/archives/$deb" "$dir/root"
done < "$dir/debs.txt"
unset APT_CONFIG

# The alternatives dpkg's postinst scripts would make (update-alternatives does not run here).
libdir="$dir/root/usr/lib/$triplet"
for lib in libblas.so.3 liblapack.so.3; do
  sub=${lib%%.so.3}; sub=${sub#lib}
  for cand in openblas-pthread/$lib atlas/$lib $sub/$lib; do
    if [ -e "$libdir/$cand" ]; then ln -sfn "$cand" "$libdir/$lib"; break; fi
  done
done
# No /tmp in the sysroot: qemu -L would send the guest's /tmp there, away from native programs.
rm -rf "$dir/root/tmp"

cat > "$dir/root/usr/bin/python3-qemu" <<EOF
#!/bin/sh
# $arch Python under user-mode emulation (scripts/arm/sysroot.sh). -0 "\$0" makes argv[0], hence
# sys.executable and a venv's pyvenv.cfg, this script's path, so children start emulated too.
exec "$qemu_dir/usr/bin/$qemu" -L "$dir/root" -cpu "\${EDGE_ARM_CPU:-$cpu}" -0 "\$0" \\
  "$dir/root/usr/bin/python3.11" "\$@"
EOF
chmod +x "$dir/root/usr/bin/python3-qemu"
# Bytecode now, by a native Python 3.11 when there is one (same magic number), not emulated.
if "$hostpy" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
  "$hostpy" -m compileall -q -j 0 -x "/(tests?|test_[a-z_]*|idlelib|lib2to3|tkinter|turtledemo)/" \
    "$dir/root/usr/lib/python3.11" "$dir/root/usr/lib/python3" >/dev/null 2>&1 || true
fi
"$dir/root/usr/bin/python3-qemu" -c 'import sys, ssl, sqlite3; assert sys.version_info[:2] == (3, 11)' \
  > "$dir/smoke.log" 2>&1 \
  || unavailable "emulated $arch Python does not start: $(tail -n 1 "$dir/smoke.log")"

# The venv as on the Pi (`python3 -m venv`), then the runtime dependencies for the Pi's platform.
venv_opts=(--without-pip)
[ -n "$from_debian" ] && venv_opts+=(--system-site-packages)
"$dir/root/usr/bin/python3-qemu" -m venv "${venv_opts[@]}" "$dir/venv"
site="$dir/venv/lib/python3.11/site-packages"
# The console script pip makes from the wheel's [project.scripts]; the package itself comes from
# the repository at run time (PYTHONPATH), so the cache does not depend on the code.
printf '#!%s\nimport sys\nfrom edge_runtime.cli import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
  "$dir/venv/bin/python" > "$dir/venv/bin/edge-runtime"
chmod +x "$dir/venv/bin/edge-runtime"
wait "$pip_runtime" || pip_failed "$dir/pip-runtime.log" "the $arch runtime wheels"
wait "$pip_test" || pip_failed "$dir/pip-test.log" "the test tools"
if [ -d "$dir/runtime" ]; then
  cp -a "$dir/runtime/." "$site/"
  rm -rf "$dir/runtime"
fi
if "$hostpy" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
  "$hostpy" -m compileall -q -j 0 -x "/tests?/" "$site" "$dir/testdeps" >/dev/null 2>&1 || true
fi

{
  echo "qemu: $(cat "$qemu_dir/version.txt") (-cpu $cpu)"
  echo "debian $SUITE $debarch: $(tr '\n' ' ' < "$dir/debs.txt")"
  echo "venv ($arch, ${venv_opts[*]}): $(ls "$site" | sed -n 's/\.dist-info$//p' | tr '\n' ' ')"
  echo "testdeps: $(ls "$dir/testdeps" | sed -n 's/\.dist-info$//p' | tr '\n' ' ')"
} > "$dir/versions.txt"
touch "$dir/.complete"
# Older builds of this arch (another key) go: the cache holds one per arch.
for old in "$cache/$arch"-*; do
  [ "$old" = "$dir" ] || rm -rf "$old"
done
log "ready: $dir"
echo "$dir"
