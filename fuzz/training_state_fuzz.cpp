// read_training_state on an arbitrary file (what --resume reads): a kestrel::Error naming the file, or a
// state whose progression a resume can use (epoch, batch, counters and world size not negative, fitness
// and summed losses finite). An input that starts with '{' is the header JSON alone (the harness writes
// its length), so that mutations of the metadata keep a well-formed file. Seeds: states written by
// write_training_state (make_safetensors_seeds) and state.json, such a header without tensors.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "kestrel/train/training_state.h"

using namespace kestrel;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file("state", ".safetensors");
  fuzz::write_safetensors_input(path, data, size);
  fuzz::expect_kestrel_errors_only(path, [&] {
    const train::TrainingState s = train::read_training_state(path);
    const train::Progression& p = s.progression;
    if (p.epoch < 0 || p.next_batch < 0 || p.best_epoch < 0 || p.loss_count < 0 || p.last_opt_step < -1 ||
        s.ema_updates < 0)
      fuzz::finding("negative progression counter accepted");
    if (s.world_size < 1) fuzz::finding("world size below 1 accepted");
    if (!std::isfinite(p.best_fitness)) fuzz::finding("non-finite best fitness");
    for (double v : p.loss_sum)
      if (!std::isfinite(v)) fuzz::finding("non-finite loss sum");
  });
  return 0;
}
