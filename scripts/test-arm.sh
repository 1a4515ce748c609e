#!/usr/bin/env bash
# The Raspberry Pi's CPUs under qemu user-mode emulation: for each of aarch64 (64-bit Pi OS,
# PyPI wheels in a venv) and armhf (32-bit Pi OS, Debian bookworm's python3-numpy,
# python3-scipy and python3-msgpack, venv with --system-site-packages), in parallel:
#   1. the sysroot, venv and test tools (scripts/arm/sysroot.sh; cached, see there);
#   2. scripts/arm/check_env.py: the installed versions satisfy pyproject.toml's ranges;
#   3. a subset of the tests (below) under emulation, against the real Mosquitto that the
#      fixtures start (native, on 127.0.0.1);
#   4. `edge-runtime run topologies/motes-light.toml --json` under emulation (every agent
#      emulated, the broker native): the root covers every leaf, error ratio <= 1.001.
# Usage: scripts/test-arm.sh [aarch64|armhf ...] [-- PYTEST ARGS]   (default: both arches)
# Skipped, exit 0, with one line saying why, where emulation or a download is not available
# (also EDGE_ARM_SKIP=1). Exit 1 when a test, the version check or the Motes run fails.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# What runs under emulation (-m "not slow"). The numerics run 40-100x slower there than
# natively (30-40x for large BLAS calls, more for small matrices and Python), the MQTT tests
# mostly wait on the broker: the subset keeps each arch's tests near 2 minutes with both
# arches sharing 2 cores. Not run here, for time (emulated, per arch): test_fpca_merge_tree
# (3 min), test_wire_fuzz (3 min), test_analytic_gaussian (1.5 min), test_fedpower_numerics
# (40 s), test_fpca_centering and test_fpca_scoring (15 s each), every other module.
TEST_MODULES=(
  # numerics: the streaming update, merge, the numpy-only kernels against scipy's (armhf:
  # Debian's scipy 1.10), resumable state, the Gaussian mechanism
  tests/test_fpca_streaming.py tests/test_fpca_merge.py tests/test_fpca_linalg_fallback.py
  tests/test_fpca_state.py tests/test_fpca_gaussian.py
  # wire format (msgpack), golden payloads
  tests/test_wire.py tests/test_wire_golden.py tests/test_fedpower_wire.py
  # topology files and splits
  tests/test_topology.py tests/test_topology_open.py
  # sources: files, pipes, commands, serial on a pseudo-terminal, leaves reading them
  tests/test_sources_core.py tests/test_sources.py tests/test_leaf_sources.py
  # leaf and aggregator agents on the real broker, leaves scoring readings against the root's
  # model, checkpoints (a SIGKILLed child writer)
  tests/test_agents.py tests/test_leaf_scoring.py tests/test_checkpoint.py
)
# Left out of those modules: over ~8 s each emulated (measured with both arches running), or
# bound to native speed.
DESELECT=(
  # reads 100,000 lines within a step timeout meant for native speed (times out emulated)
  tests/test_sources.py::test_file_resume_cost_on_100k_lines_is_measured
  tests/test_topology.py::test_contiguous_split_covers_every_row_once_in_order_and_within_one_of_the_quota  # 10 s
  tests/test_checkpoint.py::test_corrupted_bytes_are_detected_or_harmless  # 19 s
  tests/test_checkpoint.py::test_every_truncation_is_detected  # 10 s
  tests/test_fpca_streaming.py::test_oversampling_brings_motes_light_within_one_percent_of_the_offline_svd  # > 25 s
  tests/test_fpca_streaming.py::test_oversampling_recovers_directions_of_a_drifting_stream  # 10 s
  tests/test_fpca_merge.py::test_merge_at_d_800_rank_100_matches_the_svd_of_the_concatenation  # 9 s
  tests/test_fpca_gaussian.py::test_gaussian_is_far_more_accurate_than_eq8_on_motes  # > 25 s
  tests/test_fpca_state.py::test_resume_from_state_at_any_split_is_bitwise_identical_to_the_uninterrupted_run  # 20 s
  tests/test_fpca_state.py::test_adaptive_resume_keeps_the_holdoff_counter  # 10 s
  tests/test_fpca_state.py::test_from_subspace_at_a_block_boundary_continues_bitwise_like_the_uninterrupted_run  # 8 s
)
MOTES_MAX_ERROR_RATIO=1.001
ARCH_TIMEOUT_S=${EDGE_ARM_TIMEOUT:-420}  # per arch, tests + Motes run; set-up not counted

skip() { echo "test-arm: skipped: $*"; exit 0; }
[ "${EDGE_ARM_SKIP:-0}" = 1 ] && skip "EDGE_ARM_SKIP=1"

arches=() pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; pytest_args=("$@"); break ;;
    aarch64|armhf) arches+=("$1") ;;
    *) echo "usage: scripts/test-arm.sh [aarch64|armhf ...] [-- PYTEST ARGS]" >&2; exit 2 ;;
  esac
  shift
done
[ ${#arches[@]} -gt 0 ] || arches=(aarch64 armhf)

[ "$(uname -s)" = Linux ] || skip "qemu user-mode emulation needs Linux"
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] \
  || skip "Mosquitto is not installed (scripts/setup.sh installs it)"

started=$SECONDS
hostpy=python3
[ -x .venv/bin/python ] && hostpy=.venv/bin/python
out=$(mktemp -d "${TMPDIR:-/tmp}/test-arm.XXXXXX")
trap 'rm -rf "$out"' EXIT
scripts/arm/sysroot.sh qemu > /dev/null 2> "$out/qemu.err"
case $? in
  0) ;;
  3) skip "$(sed 's/^arm-sysroot: //' "$out/qemu.err" | tail -n 1)" ;;
  *) cat "$out/qemu.err"; echo "test-arm: FAILED: qemu set-up"; exit 1 ;;
esac

# One arch, all its steps; writes $out/ARCH.result: status passed failed error_ratio seconds.
run_arch() {
  local arch=$1 log="$out/$1.log" t0=$SECONDS dir rc
  dir=$(scripts/arm/sysroot.sh "$arch" 2>> "$log")
  rc=$?
  if [ $rc -eq 3 ]; then
    echo "skipped: $(sed -n 's/^arm-sysroot: //p' "$log" | tail -n 1)" > "$out/$arch.result"
    return
  elif [ $rc -ne 0 ]; then
    echo "failed 0 0 - $((SECONDS - t0)) (set-up)" > "$out/$arch.result"
    return
  fi
  local setup_s=$((SECONDS - t0)) deadline=$((SECONDS + ARCH_TIMEOUT_S))
  local py="$dir/venv/bin/python" status=passed
  if ! "$py" -c pass > "$out/$arch.smoke" 2>&1; then  # e.g. a noexec cache, a seccomp filter
    echo "skipped: the emulated $arch Python does not start here: $(tail -n 1 "$out/$arch.smoke")" \
      > "$out/$arch.result"
    return
  fi
  # The repository's package and the test tools on the path; children inherit it. One BLAS
  # thread: the two arches share the machine's cores.
  local env_=(env PYTHONPATH="$repo:$dir/testdeps" OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1)
  {
    echo "== $arch: set-up ${setup_s} s ($dir)"
    sed 's/^/   /' "$dir/versions.txt" | cut -c1-300
    "${env_[@]}" "$py" scripts/arm/check_env.py
  } >> "$log" 2>&1 || status=failed

  local t_tests=$SECONDS deselect=()
  for d in "${DESELECT[@]}"; do deselect+=(--deselect "$d"); done
  echo "== $arch: pytest -m 'not slow' ${TEST_MODULES[*]##*/}" >> "$log"
  timeout -k 10 $((deadline - SECONDS > 30 ? deadline - SECONDS : 30)) "${env_[@]}" "$py" -m pytest -q -m "not slow" \
    -p no:cacheprovider --timeout 120 --durations 5 "${TEST_MODULES[@]}" "${deselect[@]}" \
    "${pytest_args[@]}" >> "$log" 2>&1 || status=failed
  local passed failed
  passed=$(tail -n 1 "$log" | grep -o '[0-9]* passed' | cut -d' ' -f1)
  failed=$(tail -n 1 "$log" | grep -o '[0-9]* \(failed\|error\)' | awk '{ n += $1 } END { print n + 0 }')
  local tests_s=$((SECONDS - t_tests)) t_motes=$SECONDS ratio="-"

  echo "== $arch: edge-runtime run topologies/motes-light.toml --json --workers 2" >> "$log"
  if timeout -k 10 $((deadline - SECONDS > 30 ? deadline - SECONDS : 30)) "${env_[@]}" \
      "$dir/venv/bin/edge-runtime" run topologies/motes-light.toml --json --workers 2 \
      > "$out/$arch.motes.json" 2>> "$log"; then
    ratio=$("$hostpy" -c '
import json, sys
s = json.load(open(sys.argv[1]))
ok = s["covered"] and s["leaves_reporting"] == s["leaves_total"] == 8
print("%.6f" % s["error_ratio"] if ok else "not-covered")' "$out/$arch.motes.json" 2>/dev/null \
      || echo "unreadable")
  else
    ratio="run-failed"
  fi
  cat "$out/$arch.motes.json" >> "$log"
  if ! awk -v r="$ratio" -v m="$MOTES_MAX_ERROR_RATIO" 'BEGIN { exit !(r + 0 > 0 && r + 0 <= m) }'; then
    echo "test-arm: $arch: the Motes run did not reach error ratio <= $MOTES_MAX_ERROR_RATIO ($ratio)" >> "$log"
    status=failed
  fi
  echo "$status ${passed:-0} ${failed:-0} $ratio $((SECONDS - t0)) (set-up ${setup_s} s, tests ${tests_s} s, Motes $((SECONDS - t_motes)) s)" \
    > "$out/$arch.result"
}

for arch in "${arches[@]}"; do
  run_arch "$arch" &
done
wait

total_passed=0 total_failed=0 any_failed=0 any_ran=0 skipped=()
for arch in "${arches[@]}"; do
  read -r status passed failed ratio seconds rest < "$out/$arch.result"
  case "$status" in
    skipped:) skipped+=("$arch: $(cut -d' ' -f2- "$out/$arch.result")"); continue ;;
    failed) any_failed=1 ;;
  esac
  cat "$out/$arch.log"
  any_ran=1
  total_passed=$((total_passed + passed)) total_failed=$((total_failed + failed))
  echo "test-arm: $arch $status: $passed passed, $failed failed, Motes error ratio $ratio, $seconds s $rest"
done
if [ $any_ran -eq 0 ]; then
  skip "$(IFS=';'; echo "${skipped[*]}" | sed 's/;/; /g')"
fi
for line in "${skipped[@]}"; do echo "test-arm: skipped ${line%%:*}:${line#*:}"; done
echo "test-arm: $((SECONDS - started)) s in all"
echo "test-arm: $total_passed passed, $total_failed failed"
[ $any_failed -eq 0 ] && [ $total_failed -eq 0 ]
