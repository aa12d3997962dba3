#!/usr/bin/env bash
# Sets up everything kestrel needs and builds it. Idempotent: takes seconds when all is in place.
#   system packages (Debian) -> Python environment with torch 2.11.0 (cached outside the repo) -> build/
# Environment:
#   KESTREL_HOME      cache folder (default ~/.cache/kestrel); the Python environment lives in $KESTREL_HOME/venv
#   KESTREL_TORCH_DIR use your own LibTorch (<libtorch>/share/cmake/Torch) instead of the wheel's
#   KESTREL_BUILD_DIR build folder (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
KESTREL_HOME=${KESTREL_HOME:-$HOME/.cache/kestrel}
VENV=$KESTREL_HOME/venv
BUILD_DIR=${KESTREL_BUILD_DIR:-build}
say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

# ---- 1. system packages ----------------------------------------------------------------------
APT_PACKAGES=(cmake ninja-build g++ make ccache python3 libopencv-core-dev libopencv-imgproc-dev
              libopencv-videoio-dev libopencv-imgcodecs-dev  # video for kestrel detect, images other than
                                                              # JPEG/PNG: a plugin (libkestrel_video.so), see CMakeLists.txt
              libturbojpeg0-dev libpng-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
              libgtest-dev libgmock-dev libbenchmark-dev libprotobuf-dev protobuf-compiler
              libgloo-dev)  # Gloo headers for c10d's CPU process group (the torch wheel has the code, not the headers)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

# ---- 2. Python environment with torch 2.11.0 -------------------------------------------------
REQ=scripts/requirements.txt
stamp="$VENV/.kestrel-requirements"
if [ ! -f "$stamp" ] || ! cmp -s "$REQ" "$stamp"; then
  say "creating the Python environment in $VENV (first time: a few minutes)"
  mkdir -p "$KESTREL_HOME"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # torch without its pip CUDA dependencies (several GB): the system CUDA 13 toolkit has them.
  "$VENV/bin/python" -m pip install -q --no-deps "$(grep '^torch==' "$REQ")"
  grep -v -e '^#' -e '^torch==' -e '^$' "$REQ" | xargs "$VENV/bin/python" -m pip install -q
  "$VENV/bin/python" -c "import torch, numpy, pycocotools, onnxruntime, onnxsim, safetensors"
  cp "$REQ" "$stamp"
fi

# ---- 3. build ---------------------------------------------------------------------------------
cmake_args=(-S . -B "$BUILD_DIR" -G Ninja -DKESTREL_PYTHON="$VENV/bin/python")
[ -n "${KESTREL_TORCH_DIR:-}" ] && cmake_args+=(-DTorch_DIR="$KESTREL_TORCH_DIR")
command -v ccache >/dev/null && cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# A LibTorch asked for by KESTREL_TORCH_DIR must be the one the build folder was configured with: CMake
# keeps the first LibTorch's libraries in its cache, so a switch needs a fresh folder.
configured_torch=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
if [ -n "${KESTREL_TORCH_DIR:-}" ] && [ -n "$configured_torch" ] && \
   [ "$(realpath -m "$KESTREL_TORCH_DIR")" != "$(realpath -m "$configured_torch")" ]; then
  echo "setup: $BUILD_DIR was configured with Torch_DIR=$configured_torch, not KESTREL_TORCH_DIR=$KESTREL_TORCH_DIR;" \
       "use a fresh build folder (make run BUILD_DIR=build-mytorch) or remove $BUILD_DIR" >&2
  exit 1
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  say "configuring $BUILD_DIR"
  cmake "${cmake_args[@]}" >"$KESTREL_HOME/cmake-configure.log" 2>&1 || { cat "$KESTREL_HOME/cmake-configure.log"; exit 1; }
fi
say "building (ninja -C $BUILD_DIR)"
# Each torch-heavy translation unit needs 1-2 GB of memory; two jobs fit the smallest machines.
cmake --build "$BUILD_DIR" -- -j "${KESTREL_JOBS:-$(nproc)}"
