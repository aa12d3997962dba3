#!/usr/bin/env bash
# Builds kestrel's libFuzzer harnesses into build-fuzz/ (outside the CMake build and CI): each harness is
# compiled with only the sources it needs (none needs LibTorch). Usage: fuzz/build.sh [target ...]
# Targets: labels image_io disk_cache coco_eval yaml (default: all). CXX overrides the compiler (clang++).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-fuzz
mkdir -p "$out"
CXX=${CXX:-clang++}
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I src -I fuzz -I /usr/include/opencv4 -DKESTREL_SOURCE_DIR="\"$PWD\"")

build() {  # name, then sources and libraries
  local name=$1
  shift
  echo "building $out/${name}_fuzz"
  "$CXX" "${flags[@]}" "fuzz/${name}_fuzz.cpp" "$@" -o "$out/${name}_fuzz"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(labels image_io disk_cache coco_eval yaml)
for t in "${targets[@]}"; do
  case $t in
    labels) build labels src/kestrel/data/labels.cpp ;;
    image_io)
      build image_io src/kestrel/data/image_io.cpp -lopencv_core -lturbojpeg -lpng
      "$CXX" -std=c++17 -O1 -g -I src -I /usr/include/opencv4 fuzz/make_image_seeds.cpp src/kestrel/data/image_io.cpp \
        -lopencv_core -lopencv_imgproc -lturbojpeg -lpng -o "$out/make_image_seeds" ;;
    disk_cache)
      build disk_cache src/kestrel/data/disk_cache.cpp -lopencv_core
      # seed maker: no fuzzer, same sources
      "$CXX" -std=c++17 -O1 -g -I src -I /usr/include/opencv4 fuzz/make_disk_cache_seeds.cpp \
        src/kestrel/data/disk_cache.cpp -lopencv_core -o "$out/make_disk_cache_seeds" ;;
    coco_eval) build coco_eval src/kestrel/eval/coco_eval.cpp ;;
    yaml) build yaml src/kestrel/core/yaml_file.cpp src/kestrel/data/dataset_config.cpp src/kestrel/data/hyp.cpp \
            src/kestrel/models/model_config.cpp -lyaml-cpp ;;
    *) echo "unknown target '$t' (labels image_io disk_cache coco_eval yaml)" >&2; exit 2 ;;
  esac
done
