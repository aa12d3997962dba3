#!/usr/bin/env bash
# Packs what the GPU machine needs to run kestrel into build-device/ (git-ignored, carried by the device
# tool): the kestrel and kestrel_tests binaries built here, and the non-torch shared libraries they load
# (yaml-cpp, OpenCV core/imgproc and their dependencies, libpng, libjpeg-turbo ...). The GPU machine has
# PyTorch 2.11 (its LibTorch and CUDA libraries) but no package registry and no C++ -dev libraries, so
# LibTorch, the CUDA runtime and glibc are taken from there; everything else travels.
#
#   bash bench/gpu/bundle.sh            # after `make` (scripts/setup.sh) here
#   sudo bash bench/gpu/rehearse.sh     # optional: the bundle in a bare stand-in for that machine, here
#   then, with the device tool (see run.sh's header): run(command="bash bench/gpu/run.sh", carry=["build-device"], timeout_s=540)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${KESTREL_BUILD_DIR:-build}
OUT=build-device
rm -rf "$OUT" && mkdir -p "$OUT/lib"
cp "$BUILD/kestrel" "$BUILD/tests/kestrel_tests" "$OUT/"
# Libraries resolved here that are neither LibTorch's, nor CUDA's, nor the C runtime's.
for bin in "$OUT/kestrel" "$OUT/kestrel_tests"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$lib" in
    */torch/lib/*|*/cuda*/*|*/nvidia/*) continue ;;
    */libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/libutil.so*|*/ld-linux*|*/libgcc_s.so*|*/libstdc++.so*) continue ;;
  esac
  cp -L "$lib" "$OUT/lib/"
done
strip --strip-unneeded "$OUT"/kestrel "$OUT"/kestrel_tests "$OUT"/lib/* 2>/dev/null || true
# The C++ runtime built against (GCC 12), used there only if the machine's own is older (run.sh checks).
mkdir -p "$OUT/lib-fallback"
for lib in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(g++ -print-file-name="$lib")" "$OUT/lib-fallback/"
done
# The first COCO_IMAGES (48) images of coco128's train split for the end-to-end run, validated on
# themselves; the device tool carries at most 64 MiB in all (working tree included), so the rest stays.
COCO=${COCO128:-../shared/datasets/coco128}
if [ -d "$COCO/images/train2017" ]; then
  mkdir -p "$OUT/coco128/images/train2017" "$OUT/coco128/labels/train2017"
  for img in $(ls "$COCO/images/train2017" | sort | head -n "${COCO_IMAGES:-48}"); do
    cp "$COCO/images/train2017/$img" "$OUT/coco128/images/train2017/"
    label="$COCO/labels/train2017/${img%.*}.txt"
    [ -f "$label" ] && cp "$label" "$OUT/coco128/labels/train2017/"
  done
  sed -e 's|^val:.*|val: images/train2017|' "$COCO/coco128.yaml" > "$OUT/coco128/coco128.yaml"
fi
# What the device tool carries: the files git tracks or would track, and the bundle (64 MiB in all).
tree=$(git ls-files -co --exclude-standard | tr '\n' '\0' | du -cb --files0-from=- | tail -1 | cut -f1)
bundle=$(du -sb "$OUT" | cut -f1)
echo "working tree $((tree / 1048576)) MiB + bundle $((bundle / 1048576)) MiB = $(((tree + bundle) / 1048576)) MiB of the 64 MiB carried"
if [ $((tree + bundle)) -ge $((64 * 1048576)) ]; then
  echo "too large for the device tool: lower COCO_IMAGES (now ${COCO_IMAGES:-48})" >&2
  exit 1
fi
