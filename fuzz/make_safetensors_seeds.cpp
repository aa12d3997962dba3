// Writes small real files for the safetensors and training_state harnesses:
//   make_safetensors_seeds <safetensors_dir> <training_state_dir>
#include <ATen/ATen.h>

#include <cstdio>
#include <string>

#include "kestrel/core/safetensors.h"
#include "kestrel/train/training_state.h"

using namespace kestrel;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <safetensors_dir> <training_state_dir>\n", argv[0]);
    return 2;
  }
  const std::string st = argv[1], ts = argv[2];
  at::manual_seed(0);
  save_safetensors(st + "/all_dtypes.safetensors",
                   {{"f32", at::randn({2, 3})},
                    {"f16", at::randn({3}).to(at::kHalf)},
                    {"bf16", at::randn({2}).to(at::kBFloat16)},
                    {"f64", at::randn({1}).to(at::kDouble)},
                    {"i64", at::arange(2, at::kLong)},
                    {"i32", at::arange(2, at::kInt)},
                    {"i16", at::arange(2, at::kShort)},
                    {"i8", at::arange(2, at::kChar)},
                    {"u8", at::arange(3, at::kByte)},
                    {"bool", at::ones({2}, at::kBool)},
                    {"scalar", at::tensor(7.0f).reshape({})},
                    {"empty", at::zeros({0, 3})}},
                   {{"format", "pt"}, {"note", "seed"}});
  save_safetensors(st + "/one.safetensors", {{"model.0.conv.weight", at::randn({2, 1, 1, 1})}});
  save_safetensors(st + "/no_tensors.safetensors", {}, {{"format", "pt"}});

  train::TrainingState s;
  s.progression.epoch = 3;
  s.progression.next_batch = 5;
  s.progression.last_opt_step = 17;
  s.progression.best_fitness = 0.25;
  s.progression.best_epoch = 2;
  s.progression.loss_sum = {0.5, 0.25, 0.125};
  s.progression.loss_count = 5;
  s.progression.maps = {0.1, 0.2};
  s.ema_updates = 40;
  s.model = {{"0.conv.weight", at::randn({2, 1, 1, 1})}};
  s.ema = {{"0.conv.weight", at::randn({2, 1, 1, 1})}};
  s.optimizer = {{"step", at::tensor(17, at::kLong).reshape({})}};
  train::write_training_state(ts + "/state.safetensors", s);
  s.scaler = {{"scale", at::tensor(65536.0f).reshape({})}};
  s.world_size = 2;
  s.progression.maps.clear();
  train::write_training_state(ts + "/state_scaler.safetensors", s);
  return 0;
}
