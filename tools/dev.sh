#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine for Chorus and runs one of its jobs. Safe to rerun:
# packages already present are not reinstalled and an existing build directory is reused.
#
#   tools/dev.sh perf   install, build, then the main job: all_reduce_perf on 2 local ranks
#   tools/dev.sh test   install, build, then the whole test suite (what CI runs)
#   tools/dev.sh build  install and build only
#   tools/dev.sh sanitize [address|thread] [quick]
#                       the test suite built with AddressSanitizer and UndefinedBehaviorSanitizer
#                       (the default) or ThreadSanitizer, in SAN_BUILD_DIR (default
#                       build-<kind>san); any report fails the run. quick: only the suites
#                       that `test` also runs this way (address: unit, fuzz, failures and
#                       mismatches; thread: the tests whose ranks are threads of one process)
#   tools/dev.sh fuzz [runs]
#                       the libFuzzer targets of tests/fuzz (clang, AddressSanitizer and
#                       UndefinedBehaviorSanitizer) in FUZZ_BUILD_DIR (default build-fuzz), each
#                       for `runs` inputs (default 1000000) from its seeds; prints each count
#
# Environment: BUILD_DIR (default build), JOBS (default 2), PERF_ARGS (all_reduce_perf flags),
# NRANKS (default 2), MESON_TEST_ARGS (extra flags for meson test), KERNEL_ARCHS (the CUDA
# capabilities a new build directory compiles kernels for: meson's kernel_archs, 80,90 unless
# `test` finds no GPU, see below), KERNEL_SASS (false: PTX only), SANITIZE (test: thread, all
# or 0).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}

packages=(meson ninja-build pkg-config g++ libhwloc-dev libibverbs-dev googletest libgtest-dev
          libbenchmark-dev python3-numpy python3-pytest python3-torch)
# The Rust bindings' tests need cargo: Debian's, unless a rustup toolchain is there.
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  packages+=(cargo)
fi

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
  install_packages
  # nvcc is found on PATH; the CUDA toolkit's usual home is added when present.
  if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    meson setup "$BUILD_DIR" ${KERNEL_ARCHS:+-Dkernel_archs=$KERNEL_ARCHS} \
      -Dkernel_sass="$KERNEL_SASS"
  fi
  meson compile -C "$BUILD_DIR" -j "$JOBS"
}

# A machine without a GPU only compiles the CUDA kernels (its GPU tests skip): `test` compiles
# every kernel there to PTX for compute_90 only (nvcc's front end and optimiser, not ptxas),
# a quarter of the time of the default SASS for two capabilities.
KERNEL_SASS=${KERNEL_SASS:-true}
no_gpu_archs() {
  if [ -z "${KERNEL_ARCHS:-}" ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    KERNEL_ARCHS=90
    KERNEL_SASS=false
    echo "no GPU visible: CUDA kernels compiled to PTX for compute_90 only (KERNEL_ARCHS sets" \
      "the capabilities, with SASS for each)"
  fi
}

case "${1:-}" in
  build)
    build
    ;;
  perf)
    build
    # shellcheck disable=SC2086
    "$BUILD_DIR/tools/chorusrun" -n "${NRANKS:-2}" "$BUILD_DIR/perf/all_reduce_perf" \
      ${PERF_ARGS:--b 8 -e 128M -f 2 -c 1}
    ;;
  test)
    no_gpu_archs
    build
    # shellcheck disable=SC2086
    meson test -C "$BUILD_DIR" --print-errorlogs --num-processes "$JOBS" ${MESON_TEST_ARGS:-}
    # Then the quick sanitizer passes: ThreadSanitizer by default (about a minute), the
    # AddressSanitizer pass too with SANITIZE=all (about 13 minutes on two cores), none with
    # SANITIZE=0.
    case "${SANITIZE:-thread}" in
      0) ;;
      all)
        "$PWD/tools/dev.sh" sanitize address quick
        "$PWD/tools/dev.sh" sanitize thread quick
        ;;
      *) "$PWD/tools/dev.sh" sanitize thread quick ;;
    esac
    ;;
  sanitize)
    kind=${2:-address}
    case "$kind" in
      address) sanitize=address,undefined ;;
      thread) sanitize=thread ;;
      *) echo "usage: $0 sanitize [address|thread]" >&2; exit 2 ;;
    esac
    install_packages
    SAN_BUILD_DIR=${SAN_BUILD_DIR:-build-${kind:0:1}san}
    if [ ! -f "$SAN_BUILD_DIR/build.ninja" ]; then
      # The CUDA kernels and the micro-benchmarks are left out: nvcc code is not instrumented.
      # -O1 and line tables only: reports keep their file:line frames, the build takes less.
      meson setup "$SAN_BUILD_DIR" -Db_sanitize="$sanitize" -Db_lundef=false -Dcuda=disabled \
        -Dbenchmarks=disabled -Dbuildtype=plain -Dc_args="-O1 -g1" -Dcpp_args="-O1 -g1"
    fi
    # quick, address: the unit tests (but the symbolic plan tests), the fuzz targets over their
    # seeds, and the multi-rank tests of failures and mismatches (threads and forked processes,
    # shared memory and sockets). quick, thread: the tests whose ranks are threads of one process
    # (non-blocking communicators, abort, revoke, groups, the bootstrap and the connectors).
    quick_tests=()
    if [ "${3:-}" = quick ]; then
      # Each line: a test's name and the target that builds its program.
      quick=$(meson introspect "$SAN_BUILD_DIR" --tests | python3 -c '
import json, os, sys
for t in json.load(sys.stdin):
    if sys.argv[2] == "thread":
        take = t["name"] in ("test_nonblocking", "test_api_errors", "test_bootstrap",
                             "test_connector")
    else:
        # The symbolic plan tests are pure logic and run for minutes instrumented: left out.
        unit = "chorus:unit" in t["suite"] and not t["name"].endswith("_plans")
        take = unit or t["name"] in ("test_mismatch", "test_faults", "test_api_errors")
    if take:
        print(t["name"], os.path.relpath(t["cmd"][0], sys.argv[1]))' "$SAN_BUILD_DIR" "$kind")
      quick_tests=($(echo "$quick" | cut -d' ' -f1))
      # The example net plugins are loaded by test_net_plugin, the stand-in verbs library by
      # test_ib (libraries, not the tests' own targets).
      loaded="transport/nccl-net-example transport/nccl-net-example-v10 transport/nccl-net-example-v9"
      loaded="$loaded transport/nccl-net-example-v8"
      if meson introspect "$SAN_BUILD_DIR" --targets | grep -q '"name": "fake-ibverbs"'; then
        loaded="$loaded tests/ib/fake-ibverbs"
      fi
      meson compile -C "$SAN_BUILD_DIR" -j "$JOBS" $(echo "$quick" | cut -d' ' -f2 | sort -u) \
        $loaded
    else
      meson compile -C "$SAN_BUILD_DIR" -j "$JOBS"
    fi
    supp="$PWD/tools/sanitizers"
    export ASAN_OPTIONS=fast_unwind_on_malloc=0:detect_leaks=1
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
    # Instrumented code runs several times slower: the suites get longer limits.
    san_test() {
      # shellcheck disable=SC2086
      meson test -C "$SAN_BUILD_DIR" --print-errorlogs --num-processes "$JOBS" \
        --timeout-multiplier 8 ${MESON_TEST_ARGS:-} "$@"
    }
    if [ ${#quick_tests[@]} -gt 0 ] && [ "$kind" = thread ]; then
      # Without the cases that fork ranks (see below).
      GTEST_FILTER='-PeerFailure.*:Split.*' san_test --no-rebuild "${quick_tests[@]}"
    elif [ ${#quick_tests[@]} -gt 0 ]; then
      san_test --no-rebuild "${quick_tests[@]}"
    elif [ "$kind" = thread ]; then
      # ThreadSanitizer cannot follow a fork from a process that still runs threads, and the
      # API-misuse tests leave rendezvous roots waiting for ranks that never come: the tests
      # that fork ranks after them run in a process of their own.
      GTEST_FILTER='-PeerFailure.*' san_test
      GTEST_FILTER='PeerFailure.*' san_test test_api_errors
    else
      san_test
    fi
    ;;
  fuzz)
    packages+=(clang)
    install_packages
    FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
    if [ ! -f "$FUZZ_BUILD_DIR/build.ninja" ]; then
      CC=clang CXX=clang++ meson setup "$FUZZ_BUILD_DIR" -Dfuzz=enabled -Dcuda=disabled \
        -Dbenchmarks=disabled -Db_sanitize=address,undefined -Db_lundef=false \
        -Dbuildtype=debugoptimized
    fi
    targets=(fuzz_unique_id fuzz_bootstrap fuzz_topology fuzz_env)
    meson compile -C "$FUZZ_BUILD_DIR" -j "$JOBS" "${targets[@]/#/tests/fuzz/}"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    seeds_of() {
      case "$1" in
        fuzz_unique_id) echo tests/fuzz/seeds/unique_id ;;
        fuzz_bootstrap) echo tests/fuzz/seeds/bootstrap ;;
        fuzz_topology) echo tests/fuzz/seeds/topology ;;
        fuzz_env) echo tests/fuzz/seeds/env ;;
      esac
    }
    runs=${2:-1000000}
    for t in "${targets[@]}"; do
      # The corpus grows in a scratch copy; the seeds in the tree stay as they are.
      corpus=$(mktemp -d)
      cp "$(seeds_of "$t")"/* "$corpus"/
      [ "$t" = fuzz_topology ] && cp tests/fixtures/topo/*.json "$corpus"/
      log="$FUZZ_BUILD_DIR/$t.log"
      if ! "$FUZZ_BUILD_DIR/tests/fuzz/$t" -runs="$runs" -max_len=4096 -timeout=10 \
          -rss_limit_mb=2048 -print_final_stats=1 "$corpus" > "$log" 2>&1; then
        tail -40 "$log"
        echo "$t: FAILED (log: $log)"
        exit 1
      fi
      echo "$t: $(grep -m1 -o 'Done [0-9]* runs in [0-9]* second(s)' "$log"), $(grep -o 'cov: [0-9]*' "$log" | tail -1) edges, no crash"
      rm -rf "$corpus"
    done
    ;;
  *)
    echo "usage: $0 perf|test|build|sanitize|fuzz" >&2
    exit 2
    ;;
esac
