// kestrel's decoded predictions for one input tensor, for bench/val_vs_upstream.sh's model-only check
// (RAW_BIN). Manual helper, not part of the build: it links the engine library of an existing build.
//
//   kestrel_raw_predictions WEIGHTS INPUT.f32 H W OUT_UNFUSED.f32 OUT_FUSED.f32
//
// INPUT.f32: raw float32 [1, 3, H, W] (RGB, 0..1). Writes YoloModel::predict's [1, N, 5 + nc] as raw
// float32, in eval mode as loaded (what `kestrel val` runs) and after fuse() (what `kestrel detect` runs).
// Build (paths of the build in build/; T = the torch package kestrel links):
//   T=~/.cache/kestrel/venv/lib/python3.11/site-packages/torch
//   c++ -O1 -std=gnu++17 -DKESTREL_WITH_CUDA=1 -Isrc -isystem /usr/include/opencv4 -isystem $T/include \
//     -isystem $T/include/torch/csrc/api/include -isystem /usr/local/cuda/include \
//     bench/kestrel_raw_predictions.cpp -o /tmp/kestrel_raw_predictions -Wl,-rpath,$T/lib \
//     build/libkestrel_engine.a $T/lib/libtorch.so -Wl,--no-as-needed $T/lib/libtorch_cpu.so \
//     $T/lib/libtorch_cuda.so -Wl,--as-needed $T/lib/libc10_cuda.so $T/lib/libc10.so \
//     /usr/local/cuda/lib/libcudart.so -lyaml-cpp -lopencv_imgproc -lopencv_core -lpng -lz -lturbojpeg \
//     -lprotobuf -lcudadevrt -lcudart_static -lrt -lpthread -ldl
// (the libraries of the `kestrel` target's link line in build/build.ninja; without CUDA drop the CUDA ones
// and -DKESTREL_WITH_CUDA=1).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/models/weights_file.h"

namespace {

void write_raw(const char* path, const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(c.data_ptr<float>()), static_cast<std::streamsize>(c.numel() * 4));
  if (!out) std::fprintf(stderr, "%s: write failed\n", path), std::exit(1);
  std::printf("%s: [%lld, %lld, %lld]\n", path, static_cast<long long>(c.size(0)), static_cast<long long>(c.size(1)),
              static_cast<long long>(c.size(2)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s WEIGHTS INPUT.f32 H W OUT_UNFUSED.f32 OUT_FUSED.f32\n", argv[0]);
    return 2;
  }
  torch::NoGradGuard no_grad;
  kestrel::models::LoadedModel loaded = kestrel::models::load_model_weights(argv[1]);
  const int h = std::atoi(argv[3]), w = std::atoi(argv[4]);
  std::vector<float> input(static_cast<size_t>(3) * h * w);
  std::ifstream in(argv[2], std::ios::binary);
  in.read(reinterpret_cast<char*>(input.data()), static_cast<std::streamsize>(input.size() * 4));
  if (!in) std::fprintf(stderr, "%s: fewer than 3 x %d x %d floats\n", argv[2], h, w), std::exit(1);
  const at::Tensor x = at::from_blob(input.data(), {1, 3, h, w}, at::kFloat).clone();
  loaded.model->eval();
  write_raw(argv[5], loaded.model->predict(x));
  loaded.model->fuse();
  write_raw(argv[6], loaded.model->predict(x));
  return 0;
}
