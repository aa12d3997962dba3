#include "models/upstream_model_check.h"

#include <fstream>

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "test_support.h"

namespace kestrel::test {

at::Tensor upstream_model_output(models::YoloModel& model, const std::string& yaml, const std::vector<std::string>& names,
                                 const std::string& python, const std::string& checkout, const at::Tensor& x) {
  TempDir dir;
  write_file(dir.file("model.yaml"), yaml);
  models::save_model_weights(dir.file("w.safetensors"), model, models::describe_config(dir.file("model.yaml"), names));
  const auto exported = run_command(std::string(KESTREL_TEST_PYTHON) + " tools/export_state_dict.py " + dir.file("w.safetensors") +
                                    " " + dir.file("sd.pt"));
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  if (exported.exit_code != 0) return {};
  const at::Tensor c = x.contiguous();
  std::ofstream(dir.file("x.bin"), std::ios::binary).write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  std::string shape;
  for (int64_t d : c.sizes()) shape += std::to_string(d) + ", ";
  write_file(dir.file("run.py"), "import sys, numpy as np, torch\nsys.path.insert(0, '" + checkout + "')\n"
             "from models.yolo import Model\n"
             "m = Model('" + dir.file("model.yaml") + "', ch=3, nc=" + std::to_string(names.size()) + ")\n"
             "m.load_state_dict(torch.load('" + dir.file("sd.pt") + "', weights_only=True))\n"
             "m.eval()\n"
             "x = torch.from_numpy(np.fromfile('" + dir.file("x.bin") + "', np.float32).reshape(" + shape + "))\n"
             "with torch.no_grad(): y = m(x)[0]\n"
             "y.numpy().astype(np.float32).tofile('" + dir.file("y.bin") + "')\n"
             "print('SHAPE', *y.shape)\n");
  const auto run = run_command(python + " " + dir.file("run.py"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  if (run.exit_code != 0) return {};
  // "SHAPE b N k": read it back in that shape.
  const size_t at = run.output.find("SHAPE ");
  EXPECT_NE(at, std::string::npos) << run.output;
  if (at == std::string::npos) return {};
  std::istringstream dims(run.output.substr(at + 6));
  int64_t b = 0, n = 0, k = 0;
  dims >> b >> n >> k;
  at::Tensor y = at::empty({b, n, k}, at::kFloat);
  std::ifstream(dir.file("y.bin"), std::ios::binary).read(static_cast<char*>(y.data_ptr()), static_cast<std::streamsize>(y.nbytes()));
  return y;
}

void expect_matches_upstream(models::YoloModel& model, const std::string& yaml, const std::vector<std::string>& names,
                             const std::string& python, const std::string& checkout, const at::Tensor& x) {
  const at::Tensor theirs = upstream_model_output(model, yaml, names, python, checkout, x);
  ASSERT_TRUE(theirs.defined());
  torch::NoGradGuard no_grad;
  const at::Tensor ours = model.predict(x);
  ASSERT_EQ(ours.sizes(), theirs.sizes());
  EXPECT_LT((ours.narrow(2, 0, 4) - theirs.narrow(2, 0, 4)).abs().max().item<double>(), 1e-3);
  EXPECT_LT((ours.narrow(2, 4, ours.size(2) - 4) - theirs.narrow(2, 4, ours.size(2) - 4)).abs().max().item<double>(), 1e-5);
}

}  // namespace kestrel::test
