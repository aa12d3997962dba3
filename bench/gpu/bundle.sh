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
du -sh "$OUT"
echo "with the working tree this must stay under 64 MiB: $(du -sm --exclude=.git --exclude='build*' --exclude=runs . | cut -f1) MiB + $(du -sm "$OUT" | cut -f1) MiB"
