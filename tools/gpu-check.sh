#!/usr/bin/env bash
# The GPU check: one run on a machine with an NVIDIA GPU (written for a lent H200 with no
# network and the CUDA toolkit in /usr/local/cuda) that builds Chorus with CUDA, runs the GPU
# test programs, the reduction kernel against cudaMemcpy, and the perf tools on device buffers:
# 1 rank side by side with NVIDIA's NCCL when its Python wheel is there (the *_perf_nccl
# builds), 2 and 4 processes sharing GPU 0 (a short run without MPS, the rest under an MPS
# daemon of its own when nvidia-cuda-mps-control exists), and variants of channels, threads and
# FIFO size. It writes summary.txt (one PASS/FAIL/SKIP/INFO line per step), side_by_side.txt
# and logs.tgz to $OUT (default ./gpu-check-out; the logs themselves in $OUT/logs). Every step
# has a time limit, so that the whole run ends within GPU_CHECK_SECONDS (default 465); a failing
# step is recorded and the next one runs. Exits 0 when the script ran to the end.
#
#   tools/gpu-check.sh                      everything, in about 5 minutes on an H200
#   OUT=/tmp/gc BUILD_DIR=build-gpu JOBS=16 tools/gpu-check.sh
#   GPU_CHECK_MPS=0, GPU_CHECK_VARIANTS="CHANNELS/THREADS/BUFFSIZE ..."   change the runs
#
# A build made elsewhere can be carried instead (tools/gpu-check.sh --prebuild DIR on a machine
# with the CUDA toolkit: builds the targets below without hwloc and verbs, and copies the
# programs and libraries into DIR): with BUILD_DIR=DIR holding the file "prebuilt", nothing is
# built or installed, and the programs are checked to load.
#
# Only the targets the check runs are built (the perf tools, chorusrun, device_reduce_bw, the GPU
# tests); set FULL_BUILD=1 to build the whole tree. The GPU tests need GoogleTest: on a machine
# without Debian's packages or a network, carry them (here: apt-get download libgtest-dev
# googletest; there: dpkg -x each .deb into a folder and point PKG_CONFIG_PATH at its
# usr/lib/x86_64-linux-gnu/pkgconfig), else the summary says no GPU tests ran.
set -u

OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT/logs" || exit 1
OUT=$(cd "$OUT" && pwd)
TOP=$OUT        # summary.txt, side_by_side.txt and logs.tgz
OUT=$TOP/logs   # one log per step
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
LIMIT=${GPU_CHECK_SECONDS:-465}
SUMMARY="$TOP/summary.txt"
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

TARGETS=(tools/chorusrun perf/all_reduce_perf perf/all_gather_perf perf/reduce_scatter_perf
  perf/broadcast_perf perf/sendrecv_perf perf/alltoall_perf perf/micro/device_reduce_bw
  perf/all_reduce_perf_nccl perf/all_gather_perf_nccl perf/reduce_scatter_perf_nccl
  perf/broadcast_perf_nccl perf/sendrecv_perf_nccl perf/alltoall_perf_nccl
  tests/gpu/test_device_reduce tests/gpu/test_device_comm)

# --prebuild DIR: build here (sm_90) and copy what the check runs into DIR, keeping the build
# tree's layout (the programs find libchorus and libnccl.so.2 through \$ORIGIN-relative paths).
if [ "${1:-}" = --prebuild ]; then
  dest=${2:?usage: tools/gpu-check.sh --prebuild DIR}
  b=${BUILD_DIR:-build-gpu-prebuild}
  [ -f "$b/build.ninja" ] || meson setup "$b" -Dkernel_archs=90 -Dbuildtype=release \
    -Dhwloc=disabled -Dibverbs=disabled -Dbenchmarks=disabled || exit 1
  meson compile -C "$b" -j "${JOBS:-2}" "${TARGETS[@]}" || exit 1
  rm -rf "$dest" && mkdir -p "$dest" || exit 1
  for t in "${TARGETS[@]}" src/api/libchorus.so.0; do
    mkdir -p "$dest/$(dirname "$t")" && cp -L "$b/$t" "$dest/$t" || exit 1
  done
  # libnccl.so.2 is the same code as libchorus.so.0 (the loader goes by file name): a link
  # keeps the copy small.
  ln -s libchorus.so.0 "$dest/src/api/libnccl.so.2" || exit 1
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes)" \
    >"$dest/prebuilt"
  du -sh "$dest"
  exit 0
fi

PREBUILT=0
[ -f "$BUILD/prebuilt" ] && PREBUILT=1

# ---- 0. packages --------------------------------------------------------------------------------

packages=(meson ninja-build pkg-config g++ libgtest-dev googletest libhwloc-dev libbenchmark-dev)
[ $PREBUILT = 1 ] && packages=()
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ $PREBUILT = 1 ]; then
  record SKIP packages "carried build: $(cat "$BUILD/prebuilt")"
elif [ ${#missing[@]} -eq 0 ]; then
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
if [ $PREBUILT = 1 ]; then
  {
    for t in "${TARGETS[@]}"; do
      [ -x "$BUILD/$t" ] || { echo "missing: $t"; continue; }
      ldd "$BUILD/$t" 2>&1 | grep 'not found' | sed "s|^|$t: |"
    done
  } >"$OUT/build.log" 2>&1
  if [ -s "$OUT/build.log" ]; then
    record FAIL build "carried programs do not load: $(head -3 "$OUT/build.log" | tr '\n' ' ')"
  else
    built=1
    record PASS build "carried, every program loads"
  fi
else
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
        for t in "${TARGETS[@]}"; do
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

# Each GoogleTest program runs on its own with a time limit; the log keeps every test's line, so a
# program stopped at its limit still shows what passed.
run_gtest() {  # CAP NAME PROGRAM ARGS...
  local cap=$1 name=$2 exe="$BUILD/$3" t rc
  shift 3
  t=$(slot "$cap")
  if [ ! -x "$exe" ] || [ "$t" -lt 10 ]; then
    record SKIP "$name" "not built or no time left"
    return
  fi
  CHORUS_INIT_TIMEOUT=60 CHORUS_TIMEOUT=60 CHORUS_HOST_COMM=0 timeout -k 5 "$t" "$exe" \
    --gtest_color=no "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  local passed failed ran
  passed=$(grep -c '^\[       OK \]' "$OUT/$name.log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$OUT/$name.log")
  if [ $rc -eq 77 ]; then
    record FAIL "$name" "skipped (no usable GPU): $(tail -1 "$OUT/$name.log" | cut -c1-150)"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    ran=$(grep '^\[ RUN      \]' "$OUT/$name.log" | tail -1 | cut -c14-)
    record FAIL "$name" "killed after ${t}s in $ran (ok $passed, failed $failed); see $name.log"
  elif [ $rc -eq 0 ] && [ "$passed" -gt 0 ]; then
    record PASS "$name" "ok $passed"
  else
    record FAIL "$name" "exit $rc, ok $passed, failed $failed: $(grep -m3 '^\[  FAILED  \]' "$OUT/$name.log" | cut -c14- | tr '\n' ' ')"
    # The first failures' messages, for a summary read without the logs.
    grep -m12 -A3 -E 'Failure$|error|rror:' "$OUT/$name.log" | cut -c1-240 | sed 's/^/     | /' |
      head -40 | tee -a "$SUMMARY"
  fi
}

if [ $built = 1 ]; then
  run_gtest 45 test_device_reduce tests/gpu/test_device_reduce
  run_gtest 180 test_device_comm tests/gpu/test_device_comm
else
  record SKIP "gpu tests" "no CUDA build"
fi

# ---- 4. reduce-copy kernel against cudaMemcpy ---------------------------------------------------

exe="$BUILD/perf/micro/device_reduce_bw"
t=$(slot 40)
if [ $built = 1 ] && [ -x "$exe" ] && [ "$t" -ge 10 ]; then
  timeout -k 5 "$t" "$exe" 256 1024 >"$OUT/device_reduce_bw.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -qE '^ *[0-9]+ ' "$OUT/device_reduce_bw.log"; then
    # Rows: MiB, copy GB/s, f32 GB/s, f32 of copy, bf16 GB/s, bf16 of copy.
    figures=$(awk '$1 ~ /^[0-9]+$/ { printf "%s MiB: copy %s, f32 %s (%s of copy), bf16 %s (%s); ", $1, $2, $3, $4, $5, $6 }' "$OUT/device_reduce_bw.log")
    record PASS "reduce-copy vs cudaMemcpy" "${figures:-no rows}"
  else
    record FAIL "reduce-copy vs cudaMemcpy" "exit $rc: $(tail -1 "$OUT/device_reduce_bw.log" | cut -c1-150)"
  fi
else
  record SKIP "reduce-copy vs cudaMemcpy" "$exe not built or no time left"
fi

# ---- 5. perf tools on device buffers ------------------------------------------------------------

# Ranks are processes sharing GPU 0: the device ring then runs over the same-GPU P2P path
# (CUDA IPC between the processes); without MPS their kernels take turns on the GPU.
# PERF_ENV (an array of VAR=value) is added to the tool's environment.
PERF_ENV=()
run_perf() {  # CAP NRANKS LOGNAME TOOL ARGS...
  local cap=$1 n=$2 name=$3 tool=$4
  shift 4
  local log="$OUT/$name.log" t
  t=$(slot "$cap")
  if [ "$t" -lt 10 ]; then
    record SKIP "$name" "no time left"
    return 2
  fi
  env CHORUS_HOST_COMM=0 CUDA_VISIBLE_DEVICES=0 "${PERF_ENV[@]}" timeout -k 5 $((t + 5)) \
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
    unprefixed "$log" | awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0)' | head -8 |
      sed 's/^/     | /' | tee -a "$SUMMARY"
    return 1
  fi
  record PASS "$name" "avg busbw $(avg_busbw "$log") GB/s"
  return 0
}

# NVIDIA's NCCL from the Python wheel (nvidia-nccl-cu*), if any: its lib directory.
nccl_lib=""
for py in python3 /usr/bin/python3; do
  command -v "$py" >/dev/null || continue
  nccl_lib=$(timeout -k 2 20 "$py" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -f "$nccl_lib/libnccl.so.2" ] && break
  nccl_lib=""
done

# Runs a Chorus tool and the same tool on NVIDIA's NCCL (the *_nccl build with the wheel's
# library first on the path), the pair ROUNDS times, alternating; prints both logs' names.
side_by_side() {  # CAP NRANKS NAME TOOL ARGS...
  local cap=$1 n=$2 name=$3 tool=$4 r
  shift 4
  for r in $(seq 1 "${ROUNDS:-1}"); do
    PERF_ENV=()
    run_perf "$cap" "$n" "$name-chorus-r$r" "$tool" "$@"
    if [ -n "$nccl_lib" ]; then
      PERF_ENV=(LD_LIBRARY_PATH="$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                NCCL_SOCKET_IFNAME=lo NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_DEBUG=WARN)
      run_perf "$cap" "$n" "$name-nccl-r$r" "${tool}_nccl" "$@"
      PERF_ENV=()
    fi
  done
}

# MPS (GPU_CHECK_MPS=0 leaves it out): a daemon of this run only, so that the ranks' processes
# sharing the GPU run their kernels at once rather than in turns.
mps_start() {
  [ "${GPU_CHECK_MPS:-1}" = 1 ] || { record INFO mps "not used (GPU_CHECK_MPS=0)"; return 1; }
  command -v nvidia-cuda-mps-control >/dev/null || { record INFO mps "nvidia-cuda-mps-control not found"; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/chorus-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/chorus-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if timeout 10 nvidia-cuda-mps-control -d >"$OUT/mps.log" 2>&1; then
    record INFO mps "daemon started: the processes below share the GPU through MPS"
    return 0
  fi
  record INFO mps "daemon did not start: $(head -1 "$OUT/mps.log")"
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  return 1
}
mps_stop() {
  echo quit | timeout 10 nvidia-cuda-mps-control >>"$OUT/mps.log" 2>&1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

if [ $built = 1 ]; then
  if [ -n "$nccl_lib" ]; then
    record INFO "NVIDIA NCCL" "$(ls "$nccl_lib"/libnccl.so* | head -1) (from the Python wheel)"
  else
    record INFO "NVIDIA NCCL" "no nvidia-nccl wheel found: Chorus alone"
  fi
  # 1 rank: the 8-byte all-reduce from launch to completion, then the sweep.
  ROUNDS=3 side_by_side 15 1 ar-8B-n1 all_reduce_perf -b 8 -e 8 -w 50 -n 500 -c 1
  side_by_side 30 1 ar-sweep-n1 all_reduce_perf -b 8 -e 256M -f 4 -c 1
  # Processes sharing the GPU without MPS take turns on it: a short sweep shows the cost.
  run_perf 30 2 ar-n2-no-mps all_reduce_perf -b 8 -e 1M -f 8 -c 1 -w 1 -n 5
  mps=0
  mps_start && mps=1
  for n in 2 4; do
    side_by_side 30 $n "ar-sweep-n$n" all_reduce_perf -b 8 -e 256M -f 4 -c 1
  done
  # The all-reduce algorithms side by side: the ring, the direct ones reading the peers'
  # buffers on the GPU (one-shot, two-shot), and on 4 ranks the tree and recursive doubling
  # (on 2 they are one exchange, as one-shot is).
  for n in 2 4; do
    more=""
    [ "$n" = 4 ] && more="tree rd"
    for algo in ring oneshot twoshot $more; do
      PERF_ENV=(CHORUS_ALGO="$algo")
      run_perf 20 $n "ar-algo-n$n-$algo" all_reduce_perf -b 8 -e 64M -f 8 -c 1
    done
  done
  PERF_ENV=()
  # Channels, threads per block and FIFO size on the ring: each variant from 64 KiB up.
  for variant in ${GPU_CHECK_VARIANTS:-"8/256/1048576" "16/512/1048576" "32/512/1048576" "32/512/4194304"}; do
    IFS=/ read -r ch th bs <<<"$variant"
    PERF_ENV=(CHORUS_DEVICE_CHANNELS="$ch" CHORUS_DEVICE_THREADS="$th" CHORUS_BUFFSIZE="$bs")
    for n in 2 4; do
      run_perf 30 $n "ar-variant-n$n-ch$ch-t$th-b$bs" all_reduce_perf -b 64K -e 256M -f 4 -c 1
    done
  done
  PERF_ENV=()
  run_perf 30 2 sendrecv_perf-n2 sendrecv_perf -b 8 -e 64M -f 8 -c 1
  run_perf 30 4 alltoall_perf-n4 alltoall_perf -b 1K -e 64M -f 8 -c 1
  for tool in all_gather_perf reduce_scatter_perf broadcast_perf; do
    for n in 2 4; do
      run_perf 30 $n "$tool-n$n" "$tool" -b 1K -e 64M -f 8 -c 1
    done
  done
  run_perf 45 2 all_reduce_perf-n2-all-types-ops all_reduce_perf -d all -o all -b 1K -e 1M -f 32 -c 1 -w 1 -n 2
  [ $mps = 1 ] && mps_stop
else
  record SKIP "perf tools" "no CUDA build"
fi

# ---- 6. the summary ---------------------------------------------------------------------------

# Latency and bandwidth side by side: the median of the rounds, Chorus over NCCL.
{
  echo "== 8 B all-reduce, 1 rank, out-of-place time (us) per round: chorus / nccl"
  for r in 1 2 3; do
    echo "round $r: $(row "$OUT/ar-8B-n1-chorus-r$r.log" first 2>/dev/null) | $(row "$OUT/ar-8B-n1-nccl-r$r.log" first 2>/dev/null)"
  done
  for f in "$OUT"/ar-sweep-*-chorus-r1.log; do
    [ -f "$f" ] || continue
    g=${f/-chorus-/-nccl-}
    echo "== $(basename "$f" -chorus-r1.log): size, chorus oop us / busbw, nccl oop us / busbw"
    join <(unprefixed "$f" | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $8 }' | sort -k1,1) \
         <(unprefixed "$g" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $8 }' | sort -k1,1) -a 1 |
      sort -n
  done
  for n in 2 4; do
    echo "== all-reduce on $n ranks by algorithm: size, then out-of-place us / busbw for ring, oneshot, twoshot, tree, rd"
    join <(unprefixed "$OUT/ar-algo-n$n-ring.log" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $8 }' | sort -k1,1) \
         <(unprefixed "$OUT/ar-algo-n$n-oneshot.log" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $8 }' | sort -k1,1) -a 1 |
      join - <(unprefixed "$OUT/ar-algo-n$n-twoshot.log" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $8 }' | sort -k1,1) -a 1 |
      join - <(unprefixed "$OUT/ar-algo-n$n-tree.log" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $8 }' | sort -k1,1) -a 1 |
      join - <(unprefixed "$OUT/ar-algo-n$n-rd.log" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $8 }' | sort -k1,1) -a 1 |
      sort -n
  done
  echo "== all-reduce variants (channels, threads, FIFO bytes): out-of-place busbw GB/s at 4 MiB, 64 MiB, 256 MiB"
  for f in "$OUT"/ar-variant-*.log; do
    [ -f "$f" ] || continue
    echo "$(basename "$f" .log): $(unprefixed "$f" | awk '$1 == 4194304 || $1 == 67108864 || $1 == 268435456 { printf "%s ", $8 }')"
  done
} >"$TOP/side_by_side.txt" 2>&1
record DONE gpu-check "in ${SECONDS}s; logs in $OUT and $TOP/logs.tgz"
(cd "$TOP" && tar czf logs.tgz logs 2>/dev/null)
cat "$TOP/side_by_side.txt"
exit 0
