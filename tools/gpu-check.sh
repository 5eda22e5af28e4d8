#!/usr/bin/env bash
# The GPU check: one run on a machine with an NVIDIA GPU (written for a lent H200 with no
# network and the CUDA toolkit in /usr/local/cuda) that builds Chorus with CUDA, runs the GPU
# test suites and the perf tools on device buffers, and writes a log per step and a summary to
# $OUT (default ./gpu-check-out). Every step has a time limit, so that the whole run ends within
# GPU_CHECK_SECONDS (default 465); a failing step is recorded and the next one runs. Exits 0 when
# the script ran to the end: $OUT/summary.txt has one PASS/FAIL/SKIP line per step.
#
#   tools/gpu-check.sh                      everything, in about 8 minutes at most
#   OUT=/tmp/gc BUILD_DIR=build-gpu JOBS=16 tools/gpu-check.sh
#
# Only the targets the check runs are built (the perf tools, chorusrun, device_reduce_bw, the GPU
# tests); set FULL_BUILD=1 to build the whole tree. The GPU tests need GoogleTest: on a machine
# without Debian's packages or a network, carry them (here: apt-get download libgtest-dev
# googletest; there: dpkg -x each .deb into a folder and point PKG_CONFIG_PATH at its
# usr/lib/x86_64-linux-gnu/pkgconfig), else the summary says no GPU tests ran.
set -u

OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
LIMIT=${GPU_CHECK_SECONDS:-465}
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
export PATH="$PATH:/usr/local/cuda/bin"

# ---- helpers ----------------------------------------------------------------------------------

record() {  # STATUS STEP DETAILS...
  local status=$1 step=$2
  shift 2
  printf '%-4s %-34s %s\n' "$status" "$step" "$*" | tee -a "$SUMMARY"
}

# Seconds a step may take: its cap, or what is left of LIMIT less a reserve for the summary;
# at least 1 (timeout 0 would mean no limit).
slot() {  # CAP
  local left=$((LIMIT - SECONDS - 10))
  [ "$left" -lt 1 ] && left=1
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

# The perf tools' lines, without a "[rank] " prefix should chorusrun have been told to add one.
unprefixed() { sed -E 's/^\[[0-9]+\] //' "$1"; }

# "Avg bus bandwidth" of a perf log, in GB/s.
avg_busbw() { unprefixed "$1" | awk -F: '/Avg bus bandwidth/ { gsub(/ /, "", $2); v = $2 } END { print v }'; }

# A result row of a perf log in short: size, then time/busbw/#wrong out of place and in place.
row() {  # LOG first|last
  unprefixed "$1" | awk -v which="$2" '
    $1 ~ /^[0-9]+$/ && NF >= 13 { line = sprintf("%sB: oop %sus %sGB/s wrong %s, ip %sus %sGB/s wrong %s", $1, $6, $8, $9, $10, $12, $13)
                                   if (which == "first" && first == "") first = line
                                   last = line }
    END { print (which == "first" ? first : last) }'
}

first_error() { unprefixed "$1" | grep -m1 -iE 'error|fail|refuse|not supported|invalid' | cut -c1-200; }

# ---- 0. packages --------------------------------------------------------------------------------

packages=(meson ninja-build pkg-config g++ libgtest-dev googletest libhwloc-dev libbenchmark-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  record PASS packages "all present"
else
  as_root=()
  [ "$(id -u)" -ne 0 ] && as_root=(sudo -n)
  {
    echo "missing: ${missing[*]}"
    timeout -k 5 "$(slot 60)" "${as_root[@]}" apt-get update -qq
    timeout -k 5 "$(slot 120)" "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${missing[@]}"
  } >"$OUT/packages.log" 2>&1
  still=()
  for p in "${missing[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || still+=("$p")
  done
  if [ ${#still[@]} -eq 0 ]; then
    record PASS packages "installed ${missing[*]}"
  else
    record FAIL packages "not installed (no network?): ${still[*]}; continuing, see packages.log"
  fi
fi

# ---- 1. build -----------------------------------------------------------------------------------

built=0
build_start=$SECONDS
{
  echo "== nvcc"
  nvcc --version 2>&1 | tail -2
  if [ ! -f "$BUILD/build.ninja" ]; then
    echo "== meson setup"
    timeout -k 5 "$(slot 90)" meson setup "$BUILD" -Dkernel_archs=90 -Dbuildtype=release
  fi
  if [ -f "$BUILD/build.ninja" ]; then
    targets=()
    if [ "${FULL_BUILD:-0}" != 1 ]; then
      for t in tools/chorusrun perf/all_reduce_perf perf/all_gather_perf perf/reduce_scatter_perf \
        perf/broadcast_perf perf/sendrecv_perf perf/alltoall_perf perf/micro/device_reduce_bw \
        tests/gpu/test_device_reduce tests/gpu/test_device_comm; do
        grep -q "^build $t: " "$BUILD/build.ninja" && targets+=("$t")
      done
    fi
    echo "== meson compile ${targets[*]:-(all)}"
    timeout -k 5 "$(slot 300)" meson compile -C "$BUILD" -j "$JOBS" "${targets[@]}"
    echo "build exit status $?"
  fi
} >"$OUT/build.log" 2>&1
build_time=$((SECONDS - build_start))
cuda_on=$(grep -c '#define CHORUS_HAVE_CUDA 1' "$BUILD/chorus_config.h" 2>/dev/null)
if grep -q '^build exit status 0$' "$OUT/build.log" && [ -x "$BUILD/perf/all_reduce_perf" ]; then
  if [ "${cuda_on:-0}" -ge 1 ]; then
    built=1
    record PASS build "CUDA sm_90, ${build_time}s"
  else
    record FAIL build "built WITHOUT CUDA (nvcc or cuda_runtime_api.h not found); see build.log"
  fi
else
  record FAIL build "after ${build_time}s: $(grep -m1 -E 'error|ERROR|Timeout|build exit status' "$OUT/build.log" | cut -c1-160); GPU steps skipped"
fi

# ---- 2. nvidia-smi ------------------------------------------------------------------------------

if command -v nvidia-smi >/dev/null; then
  timeout -k 2 "$(slot 20)" nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
  gpu=$(timeout -k 2 "$(slot 10)" nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader 2>/dev/null | head -1)
  if [ -n "$gpu" ]; then record PASS nvidia-smi "$gpu"; else record FAIL nvidia-smi "no GPU listed"; fi
else
  record SKIP nvidia-smi "nvidia-smi not found"
fi

# ---- 3. GPU test suites -------------------------------------------------------------------------

if [ $built = 1 ]; then
  t=$(slot 120)
  timeout -k 5 "$t" meson test -C "$BUILD" --no-rebuild --suite gpu --print-errorlogs \
    >"$OUT/gpu-tests.log" 2>&1
  rc=$?
  count() { awk -v k="$1:" '$1 == k { print $2 }' "$OUT/gpu-tests.log" | tail -1; }
  ok=$(count Ok) fails=$(count Fail) skipped=$(count Skipped) timeouts=$(count Timeout)
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record FAIL "gpu tests" "killed after ${t}s (ok ${ok:-?}); see gpu-tests.log"
  elif [ -z "$ok" ]; then
    record FAIL "gpu tests" "no GPU tests ran (gtest missing?); see gpu-tests.log"
  elif [ "${fails:-0}" = 0 ] && [ "${timeouts:-0}" = 0 ] && [ "${skipped:-0}" = 0 ] && [ "$ok" -gt 0 ]; then
    record PASS "gpu tests" "ok $ok"
  else
    record FAIL "gpu tests" "ok $ok, fail ${fails:-0}, timeout ${timeouts:-0}, skipped ${skipped:-0} (skipped: no usable GPU); see gpu-tests.log"
  fi
else
  record SKIP "gpu tests" "no CUDA build"
fi

# ---- 4. perf tools on device buffers ------------------------------------------------------------

# Ranks are processes sharing GPU 0: the device ring then runs over the same-GPU P2P path
# (CUDA IPC between the processes); without MPS their kernels take turns on the GPU.
run_perf() {  # CAP NRANKS LOGNAME TOOL ARGS...
  local cap=$1 n=$2 name=$3 tool=$4
  shift 4
  local log="$OUT/$name.log" t
  t=$(slot "$cap")
  if [ "$t" -lt 10 ]; then
    record SKIP "$name" "no time left"
    return 2
  fi
  CHORUS_HOST_COMM=0 CUDA_VISIBLE_DEVICES=0 timeout -k 5 $((t + 5)) \
    "$BUILD/tools/chorusrun" -n "$n" --timeout "$t" "$BUILD/perf/$tool" "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record FAIL "$name" "timed out after ${t}s; see $name.log"
    return 1
  fi
  if [ $rc -ne 0 ]; then
    record FAIL "$name" "exit $rc: $(first_error "$log")"
    return 1
  fi
  if ! unprefixed "$log" | grep -q 'Device buffers on GPU'; then
    record FAIL "$name" "ran on host memory, not device buffers"
    return 1
  fi
  if ! unprefixed "$log" | grep -qE 'Out of bounds values *: 0 OK'; then
    record FAIL "$name" "wrong results: $(unprefixed "$log" | grep 'Out of bounds')"
    return 1
  fi
  record PASS "$name" "avg busbw $(avg_busbw "$log") GB/s"
  return 0
}

if [ $built = 1 ]; then
  for n in 1 2 4; do
    if run_perf 60 $n "all_reduce_perf-n$n" all_reduce_perf -b 8 -e 256M -f 4 -c 1; then
      echo "     8 B:      $(row "$OUT/all_reduce_perf-n$n.log" first)" | tee -a "$SUMMARY"
      echo "     largest:  $(row "$OUT/all_reduce_perf-n$n.log" last)" | tee -a "$SUMMARY"
    fi
  done
  # Sends and receives on device buffers: one peer, then every peer.
  run_perf 30 2 sendrecv_perf-n2 sendrecv_perf -b 8 -e 64M -f 8 -c 1
  run_perf 30 4 alltoall_perf-n4 alltoall_perf -b 1K -e 64M -f 8 -c 1
  run_perf 45 2 all_reduce_perf-n2-all-types-ops all_reduce_perf -d all -o all -b 1K -e 1M -f 32 -c 1
  for n in 1 2 4; do
    for tool in all_gather_perf reduce_scatter_perf broadcast_perf; do
      run_perf 30 $n "$tool-n$n" "$tool" -b 1K -e 64M -f 8 -c 1
    done
  done
else
  record SKIP "perf tools" "no CUDA build"
fi

# ---- 5. reduce-copy kernel against cudaMemcpy ---------------------------------------------------

exe="$BUILD/perf/micro/device_reduce_bw"
t=$(slot 60)
if [ $built = 1 ] && [ -x "$exe" ] && [ "$t" -ge 10 ]; then
  timeout -k 5 "$t" "$exe" 256 1024 >"$OUT/device_reduce_bw.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    # Rows: MiB, copy GB/s, f32 GB/s, f32 of copy, bf16 GB/s, bf16 of copy.
    figures=$(awk '$1 ~ /^[0-9]+$/ { printf "%s MiB: copy %s, f32 %s (%s of copy), bf16 %s (%s); ", $1, $2, $3, $4, $5, $6 }'       "$OUT/device_reduce_bw.log")
    record PASS "reduce-copy vs cudaMemcpy" "${figures:-no rows}"
  else
    record FAIL "reduce-copy vs cudaMemcpy" "exit $rc; see device_reduce_bw.log"
  fi
else
  record SKIP "reduce-copy vs cudaMemcpy" "$exe not built or no time left"
fi

# ---- 6. NVIDIA NCCL wheel -----------------------------------------------------------------------

nccl=""
for py in /usr/bin/python3 python3; do
  command -v "$py" >/dev/null || continue
  [ "$(slot 20)" -lt 5 ] && break
  nccl=$(timeout -k 2 "$(slot 20)" "$py" - 2>/dev/null <<'EOF'
import importlib.metadata as md
import nvidia.nccl
names = sorted({f"{d.metadata['Name']} {d.version}" for d in md.distributions()
                if (d.metadata['Name'] or '').lower().startswith('nvidia-nccl')})
print(', '.join(names) or 'version unknown', 'at', ', '.join(nvidia.nccl.__path__))
EOF
  ) && [ -n "$nccl" ] && break
  nccl=""
done
if [ -n "$nccl" ]; then
  record SKIP "NCCL side by side" "wheel $nccl; a side-by-side run needs nccl-tests (not in the image): the perf tools link Chorus"
else
  record SKIP "NCCL side by side" "no nvidia-nccl-cu* wheel found"
fi

record DONE gpu-check "in ${SECONDS}s; logs in $OUT"
exit 0
