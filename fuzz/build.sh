#!/usr/bin/env bash
# Builds kestrel's libFuzzer harnesses into build-fuzz/ (outside the CMake build and CI): each harness is
# compiled with only the sources it needs. Usage: fuzz/build.sh [target ...]
# Targets: labels image_io disk_cache coco_eval yaml dataset_index (no LibTorch) and safetensors
# training_state weights_file (LibTorch: TORCH_DIR, default the torch package of ~/.cache/kestrel/venv or
# $KESTREL_HOME/venv). Default: all. CXX overrides the compiler (clang++).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-fuzz
mkdir -p "$out"
CXX=${CXX:-clang++}
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I src -I fuzz -I /usr/include/opencv4 -DKESTREL_SOURCE_DIR="\"$PWD\"")

# LibTorch (uninstrumented, as the other libraries): the wheel's headers and shared libraries.
torch_flags() {
  if [ -z "${TORCH_DIR:-}" ]; then
    TORCH_DIR=$("${KESTREL_HOME:-$HOME/.cache/kestrel}/venv/bin/python" -c \
      'import torch, os; print(os.path.dirname(torch.__file__))')
  fi
  local abi
  abi=$("${KESTREL_HOME:-$HOME/.cache/kestrel}/venv/bin/python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null || echo 1)
  torch=(-isystem "$TORCH_DIR/include" -isystem "$TORCH_DIR/include/torch/csrc/api/include" -D_GLIBCXX_USE_CXX11_ABI="$abi"
         -L "$TORCH_DIR/lib" -Wl,-rpath,"$TORCH_DIR/lib" -ltorch_cpu -lc10)
}

build() {  # name, then sources and libraries; core/regular_file.cpp and python_repr.cpp always
  local name=$1
  shift
  echo "building $out/${name}_fuzz"
  "$CXX" "${flags[@]}" "fuzz/${name}_fuzz.cpp" src/kestrel/core/regular_file.cpp src/kestrel/core/python_repr.cpp "$@" -o "$out/${name}_fuzz"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(labels image_io disk_cache coco_eval yaml dataset_index safetensors training_state weights_file)
for t in "${targets[@]}"; do
  case $t in
    labels) build labels src/kestrel/data/labels.cpp ;;
    image_io)
      # video_io.cpp: image_io hands other formats to the OpenCV plugin, which a harness does not find (it
      # looks next to the binary and at $KESTREL_VIDEO_PLUGIN): those inputs end in kestrel's error.
      build image_io src/kestrel/data/image_io.cpp src/kestrel/data/video_io.cpp src/kestrel/core/atomic_file.cpp \
        -lopencv_core -lturbojpeg -lpng
      "$CXX" -std=c++17 -O1 -g -I src -I /usr/include/opencv4 fuzz/make_image_seeds.cpp src/kestrel/data/image_io.cpp \
        src/kestrel/data/video_io.cpp src/kestrel/core/atomic_file.cpp src/kestrel/core/regular_file.cpp -lopencv_core -lopencv_imgproc -lturbojpeg -lpng \
        -o "$out/make_image_seeds" ;;
    disk_cache)
      build disk_cache src/kestrel/data/disk_cache.cpp src/kestrel/core/atomic_file.cpp src/kestrel/core/file_stamp.cpp -lopencv_core
      # seed maker: no fuzzer, same sources
      "$CXX" -std=c++17 -O1 -g -I src -I /usr/include/opencv4 fuzz/make_disk_cache_seeds.cpp \
        src/kestrel/data/disk_cache.cpp src/kestrel/core/atomic_file.cpp src/kestrel/core/file_stamp.cpp -lopencv_core \
        -o "$out/make_disk_cache_seeds" ;;
    coco_eval) build coco_eval src/kestrel/eval/coco_eval.cpp ;;
    yaml) build yaml src/kestrel/core/yaml_file.cpp src/kestrel/data/dataset_config.cpp src/kestrel/data/hyp.cpp \
            src/kestrel/models/model_config.cpp -lyaml-cpp ;;
    dataset_index)
      build dataset_index src/kestrel/data/dataset_index.cpp src/kestrel/data/label_cache.cpp src/kestrel/data/image_files.cpp \
        src/kestrel/data/image_io.cpp src/kestrel/data/video_io.cpp src/kestrel/data/labels.cpp src/kestrel/core/atomic_file.cpp \
        src/kestrel/core/file_stamp.cpp -lopencv_core -lturbojpeg -lpng
      "$CXX" -std=c++17 -O1 -g -I src fuzz/make_index_seeds.cpp src/kestrel/data/label_cache.cpp \
        src/kestrel/data/image_files.cpp src/kestrel/core/file_stamp.cpp -o "$out/make_index_seeds" ;;
    safetensors|training_state)
      torch_flags
      if [ "$t" = safetensors ]; then build safetensors src/kestrel/core/safetensors.cpp src/kestrel/core/atomic_file.cpp "${torch[@]}"
      else build training_state src/kestrel/train/training_state.cpp src/kestrel/train/train_options.cpp \
             src/kestrel/core/safetensors.cpp src/kestrel/core/atomic_file.cpp "${torch[@]}"; fi
      # seed maker for both (no fuzzer, no sanitizers; built once: delete it to rebuild)
      [ -x "$out/make_safetensors_seeds" ] || "$CXX" -std=c++17 -O1 -g -I src fuzz/make_safetensors_seeds.cpp \
        src/kestrel/core/safetensors.cpp src/kestrel/train/training_state.cpp src/kestrel/train/train_options.cpp \
        src/kestrel/core/atomic_file.cpp src/kestrel/core/regular_file.cpp "${torch[@]}" -o "$out/make_safetensors_seeds" ;;
    weights_file)
      torch_flags
      build weights_file src/kestrel/models/weights_file.cpp src/kestrel/models/model_config.cpp src/kestrel/core/yaml_file.cpp \
        src/kestrel/core/safetensors.cpp src/kestrel/core/atomic_file.cpp src/kestrel/models/parameter_budget.cpp "${torch[@]}" -lyaml-cpp ;;
    *) echo "unknown target '$t' (labels image_io disk_cache coco_eval yaml dataset_index safetensors training_state weights_file)" >&2; exit 2 ;;
  esac
done
