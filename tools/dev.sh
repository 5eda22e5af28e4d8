#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine for Chorus and runs one of its jobs. Safe to rerun:
# packages already present are not reinstalled and an existing build directory is reused.
#
#   tools/dev.sh perf   install, build, then the main job: all_reduce_perf on 2 local ranks
#   tools/dev.sh test   install, build, then the whole test suite (what CI runs)
#   tools/dev.sh build  install and build only
#
# Environment: BUILD_DIR (default build), JOBS (default 2), PERF_ARGS (all_reduce_perf flags),
# NRANKS (default 2), MESON_TEST_ARGS (extra flags for meson test).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}

packages=(meson ninja-build pkg-config g++ libhwloc-dev libibverbs-dev googletest libgtest-dev
          libbenchmark-dev)

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
    meson setup "$BUILD_DIR"
  fi
  meson compile -C "$BUILD_DIR" -j "$JOBS"
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
    build
    # shellcheck disable=SC2086
    meson test -C "$BUILD_DIR" --print-errorlogs --num-processes "$JOBS" ${MESON_TEST_ARGS:-}
    ;;
  *)
    echo "usage: $0 perf|test|build" >&2
    exit 2
    ;;
esac
