#!/bin/sh
# Usage: compare_layout.sh LAYOUT_NVIDIA LAYOUT_OURS
# Runs both layout printers and fails on any difference, except the lines that carry the API
# level: Chorus claims 2.27.7 while the toolkit's header is 2.28.x (layout_ours.cc checks
# its own values of these).
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 LAYOUT_NVIDIA LAYOUT_OURS" >&2
  exit 2
fi

# Keys whose values differ by design; each must appear in both outputs.
excluded='macro NCCL_MINOR
macro NCCL_PATCH
macro NCCL_VERSION_CODE
init ncclConfig_t.version
init ncclSimInfo_t.version'

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

"$1" >"$tmp/nvidia.txt" || { echo "$1 failed" >&2; exit 1; }
"$2" >"$tmp/ours.txt" || { echo "$2 failed" >&2; exit 1; }

status=0
echo "$excluded" | while IFS= read -r key; do
  for side in nvidia ours; do
    if ! grep -q "^$key " "$tmp/$side.txt"; then
      echo "missing line '$key' in the $side output" >&2
      exit 1
    fi
  done
done || status=1

filter() {
  echo "$excluded" | sed 's/^/^/; s/$/ /' >"$tmp/patterns"
  grep -v -f "$tmp/patterns" "$1"
}
filter "$tmp/nvidia.txt" >"$tmp/nvidia.cmp"
filter "$tmp/ours.txt" >"$tmp/ours.cmp"
if ! diff -u "$tmp/nvidia.cmp" "$tmp/ours.cmp"; then
  echo "include/nccl.h differs from NVIDIA's nccl.h (lines above: - NVIDIA, + Chorus)" >&2
  status=1
fi
if [ "$status" -eq 0 ]; then
  echo "layouts match ($(wc -l <"$tmp/ours.cmp") lines compared)"
fi
exit "$status"
