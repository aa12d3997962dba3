// Data parallel over c10d with Gloo on CPU: each rank is a thread of this test with its own process
// group over a shared FileStore (or the TCPStore of init()). Checks the initial broadcast, that
// bucketed gradient averaging over 2 ranks with loss x world_size equals one process accumulating
// the two half-batches, and that a missing rank is a clear error after the timeout, not a hang.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/optim/sgd.h>

#include "kestrel/core/error.h"
#include "kestrel/dist/launcher.h"
#include "kestrel/dist/process_group.h"
#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/training_state.h"
#include "dist/dist_test_support.h"
#include "test_support.h"

namespace kestrel::dist {
namespace {

using namespace std::chrono_literals;
using test::close_rel;
using test::copy_state;
using test::file_group;
using test::run_ranks;
using test::ScopedEnv;

const c10::Device kCpu(c10::kCPU);

std::shared_ptr<models::YoloModel> yolov5n() {
  return models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 3);
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(DistEnv, SingleProcessWithoutVariables) {
  ScopedEnv env({{"WORLD_SIZE", ""}, {"RANK", ""}, {"LOCAL_RANK", ""}});
  const DistContext ctx = init_from_env(kCpu, 5s);
  EXPECT_FALSE(ctx.enabled);
  EXPECT_EQ(ctx.world_size, 1);
  EXPECT_EQ(ctx.rank, 0);
}

TEST(DistEnv, MpiAndSlurmVariables) {
  const std::vector<std::pair<std::string, std::string>> clear{
      {"WORLD_SIZE", ""}, {"RANK", ""}, {"LOCAL_RANK", ""}, {"OMPI_COMM_WORLD_SIZE", ""}, {"OMPI_COMM_WORLD_RANK", ""},
      {"OMPI_COMM_WORLD_LOCAL_RANK", ""}, {"PMI_SIZE", ""}, {"PMI_RANK", ""}, {"MPI_LOCALRANKID", ""},
      {"SLURM_NTASKS", ""}, {"SLURM_STEP_NUM_TASKS", ""}, {"SLURM_PROCID", ""}, {"SLURM_LOCALID", ""}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29400"},
      {"LOCAL_WORLD_SIZE", ""}, {"OMPI_COMM_WORLD_LOCAL_SIZE", ""}, {"MPI_LOCALNRANKS", ""}, {"SLURM_NTASKS_PER_NODE", ""}};
  ScopedEnv cleared(clear);
  {
    ScopedEnv slurm({{"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"},
                     {"SLURM_NTASKS_PER_NODE", "4"}});
    const DistEnv e = read_env();
    EXPECT_EQ(e.world_size, 8);
    EXPECT_EQ(e.rank, 5);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.local_world_size, 4);
    EXPECT_EQ(e.master_addr, "10.1.2.3");
  }
  {
    ScopedEnv ompi({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                    {"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}});  // mpirun inside a one-task allocation
    const DistEnv e = read_env();
    EXPECT_EQ(e.world_size, 4);
    EXPECT_EQ(e.rank, 2);
    EXPECT_EQ(e.local_rank, 0);
    EXPECT_EQ(e.local_world_size, 4);  // not given: every rank counted on this node
  }
  {
    // torchrun / kestrel's launcher; an unreadable local size falls back to the world size (binding only)
    ScopedEnv torchrun({{"WORLD_SIZE", "8"}, {"RANK", "6"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}});
    EXPECT_EQ(read_env().local_world_size, 4);
    ScopedEnv odd({{"LOCAL_WORLD_SIZE", "4(x2)"}, {"MPI_LOCALNRANKS", ""}});
    EXPECT_EQ(read_env().local_world_size, 8);
  }
  {
    ScopedEnv pmi({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}});
    const DistEnv e = read_env();
    EXPECT_EQ(e.world_size, 2);
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.local_rank, 1);  // no MPI_LOCALRANKID: the rank (one node)
  }
  {
    // A batch script or salloc shell of 4 tasks: the allocation's variables without an srun step's. One
    // process, as train.py (it would otherwise wait for ranks 1-3 forever).
    ScopedEnv batch({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
    EXPECT_EQ(read_env().world_size, 1);
  }
  {
    ScopedEnv torchrun({{"WORLD_SIZE", "1"}, {"SLURM_NTASKS", "16"}, {"SLURM_STEP_NUM_TASKS", "16"}, {"SLURM_PROCID", "3"}});  // torchrun wins
    EXPECT_EQ(read_env().world_size, 1);
  }
  ScopedEnv bad({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "7"}});
  try {
    (void)read_env();
    ADD_FAILURE() << "SLURM_PROCID 7 of 2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_PROCID=\"7\""), std::string::npos) << e.what();
  }
}

TEST(DistEnv, BadVariablesAreNamed) {
  auto message = [](std::vector<std::pair<std::string, std::string>> vars) {
    ScopedEnv env(std::move(vars));
    try {
      (void)read_env();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"WORLD_SIZE", "two"}}).find("WORLD_SIZE=\"two\""), std::string::npos);
  EXPECT_NE(message({{"WORLD_SIZE", "2"}, {"RANK", "2"}}).find("RANK=\"2\""), std::string::npos);
  EXPECT_NE(message({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", ""}}).find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(message({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "99999"}})
                .find("MASTER_PORT"),
            std::string::npos);
  ScopedEnv env({{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"},
                 {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
  const DistEnv e = read_env();
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.restart_count, 2);
}

class DistGloo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend_available(kCpu)) GTEST_SKIP() << "this build has no Gloo headers (libgloo-dev)";
  }
  test::TempDir dir;
};

TEST_F(DistGloo, BroadcastMakesRank1EqualRank0) {
  torch::manual_seed(1);
  auto m0 = yolov5n();
  torch::manual_seed(2);
  auto m1 = yolov5n();
  {
    torch::NoGradGuard g;
    for (auto& b : m1->buffers())
      if (at::isFloatingType(b.scalar_type())) b.add_(0.5);  // BN running stats differ too
  }
  ASSERT_FALSE(at::equal(m0->parameters()[0], m1->parameters()[0]));
  std::vector<at::Tensor> before0;
  for (auto& p : m0->parameters()) before0.push_back(p.clone());
  run_ranks(2, [&](int rank) {
    const DistContext ctx = file_group(dir.file("store"), rank, 2);
    EXPECT_TRUE(ctx.enabled);
    broadcast_module(rank == 0 ? *m0 : *m1, ctx);
  });
  auto p0 = m0->parameters(), p1 = m1->parameters();
  for (size_t i = 0; i < p0.size(); ++i) {
    EXPECT_TRUE(at::equal(p0[i], p1[i])) << "parameter " << i;
    EXPECT_TRUE(at::equal(p0[i], before0[i])) << "rank 0 changed parameter " << i;
  }
  auto b0 = m0->buffers(), b1 = m1->buffers();
  for (size_t i = 0; i < b0.size(); ++i) EXPECT_TRUE(at::equal(b0[i], b1[i])) << "buffer " << i;
}

// Upstream DDP convention: each rank's loss x WORLD_SIZE, gradients averaged by the all-reduce
// == one process summing the gradients of the same half-batches (BN sees the same halves in both).
TEST_F(DistGloo, GradientAveragingEqualsSingleProcessAccumulation) {
  constexpr int kWorld = 2;
  torch::manual_seed(0);
  auto reference = yolov5n();
  torch::manual_seed(3);
  const at::Tensor images = at::rand({4, 3, 64, 64});
  // targets [B, M, 5] (class, x, y, w, h normalised), two slots per image, the second padding on odd images.
  at::Tensor targets = at::zeros({4, 2, 5});
  targets.select(-1, 0).copy_(at::randint(0, 3, {4, 2}));
  targets.narrow(-1, 1, 2).copy_(at::rand({4, 2, 2}) * 0.6 + 0.2);
  targets.narrow(-1, 3, 2).copy_(at::rand({4, 2, 2}) * 0.3 + 0.1);
  const at::Tensor mask = at::tensor({1, 1, 1, 0, 1, 1, 1, 0}).to(at::kBool).view({4, 2});
  const loss::YoloLoss criterion(reference->head(), loss::LossOptions{}, 64);
  auto half = [&](const at::Tensor& t, int r) { return t.narrow(0, 2 * r, 2); };

  std::vector<std::shared_ptr<models::YoloModel>> ranks;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(10 + r);  // different until the broadcast
    ranks.push_back(yolov5n());
  }
  copy_state(*reference, *ranks[0]);

  // One process: both halves one after the other, gradients summed; then one SGD step.
  reference->train();
  for (int r = 0; r < kWorld; ++r) {
    const auto res = criterion(reference->forward(half(images, r)), half(targets, r), half(mask, r));
    res.total.backward();
  }
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).nesterov(true));
  std::vector<at::Tensor> ref_grads;
  for (auto& p : reference->parameters()) ref_grads.push_back(p.grad().clone());
  ref_opt.step();

  size_t buckets = 0;
  run_ranks(kWorld, [&](int rank) {
    const DistContext ctx = file_group(dir.file("store"), rank, kWorld);
    auto& model = *ranks[rank];
    broadcast_module(model, ctx);
    model.train();
    GradientReducer reducer(model.parameters(), ctx, /*bucket_mb=*/1.0);  // several buckets
    if (rank == 0) buckets = reducer.num_buckets();
    const auto res = criterion(model.forward(half(images, rank)), half(targets, rank), half(mask, rank));
    (res.total * ctx.world_size).backward();
    // Not vacuous: before the all-reduce this rank's gradient is not the reference's.
    EXPECT_GT((model.parameters().back().grad() - ref_grads.back()).norm().item<double>(),
              1e-3 * ref_grads.back().norm().item<double>());
    reducer.reduce();
    torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).nesterov(true));
    opt.step();
  });
  EXPECT_GT(buckets, 1u);

  const auto pref = reference->parameters();
  for (int r = 0; r < kWorld; ++r) {
    const auto p = ranks[r]->parameters();
    ASSERT_EQ(p.size(), pref.size());
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_TRUE(close_rel(p[i].grad(), ref_grads[i], 1e-5)) << "rank " << r << " gradient of parameter " << i;
      EXPECT_TRUE(close_rel(p[i], pref[i], 1e-5)) << "rank " << r << " parameter " << i << " after SGD";
    }
  }
  // And the ranks agree exactly with each other (same averaged gradient, same step).
  for (size_t i = 0; i < pref.size(); ++i)
    EXPECT_TRUE(at::equal(ranks[0]->parameters()[i], ranks[1]->parameters()[i])) << "parameter " << i;
}

// The trainer's use: buckets start inside backward (prepare_backward(true)) and micro-steps of
// gradient accumulation do not communicate. 2 ranks x 2 micro-batches of 1 image, loss x world size
// == one process accumulating the 4 images.
TEST_F(DistGloo, OverlappedReductionWithAccumulationEqualsSingleProcess) {
  constexpr int kWorld = 2;
  torch::manual_seed(0);
  auto reference = yolov5n();
  torch::manual_seed(4);
  const at::Tensor images = at::rand({4, 3, 64, 64});
  at::Tensor targets = at::zeros({4, 1, 5});
  targets.narrow(-1, 1, 2).copy_(at::rand({4, 1, 2}) * 0.6 + 0.2);
  targets.narrow(-1, 3, 2).copy_(at::rand({4, 1, 2}) * 0.3 + 0.1);
  const at::Tensor mask = at::ones({4, 1}, at::kBool);
  const loss::YoloLoss criterion(reference->head(), loss::LossOptions{}, 64);
  auto one = [&](const at::Tensor& t, int64_t i) { return t.narrow(0, i, 1); };

  reference->train();
  for (int64_t i = 0; i < 4; ++i) criterion(reference->forward(one(images, i)), one(targets, i), one(mask, i)).total.backward();
  std::vector<at::Tensor> ref_grads;
  for (auto& p : reference->parameters()) ref_grads.push_back(p.grad().clone());

  std::vector<std::shared_ptr<models::YoloModel>> ranks{yolov5n(), yolov5n()};
  for (auto& m : ranks) copy_state(*reference, *m);
  std::vector<size_t> buckets(kWorld), started_first(kWorld), started_last(kWorld);
  std::vector<at::Tensor> local_after_first(kWorld);
  run_ranks(kWorld, [&](int rank) {
    const DistContext ctx = file_group(dir.file("store"), rank, kWorld);
    auto& model = *ranks[rank];
    model.train();
    GradientReducer reducer(model.parameters(), ctx, /*bucket_mb=*/0.5);
    buckets[rank] = reducer.num_buckets();
    for (int micro = 0; micro < 2; ++micro) {
      const int64_t i = 2 * rank + micro;
      reducer.prepare_backward(/*sync=*/micro == 1);
      (criterion(model.forward(one(images, i)), one(targets, i), one(mask, i)).total * kWorld).backward();
      if (micro == 0) {
        started_first[rank] = reducer.buckets_started_in_backward();
        local_after_first[rank] = model.parameters().back().grad().clone();
      }
    }
    started_last[rank] = reducer.buckets_started_in_backward();
    reducer.reduce();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_GT(buckets[r], 2u);
    EXPECT_EQ(started_first[r], 0u) << "a micro-step that does not end in an optimiser step communicated";
    EXPECT_EQ(started_last[r], buckets[r]) << "every bucket should start inside backward (all parameters get gradients)";
    const auto p = ranks[r]->parameters();
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_TRUE(close_rel(p[i].grad(), ref_grads[i], 1e-5)) << "rank " << r << " gradient of parameter " << i;
  }
  // The first micro-step's gradients stayed local: the ranks saw different images.
  EXPECT_FALSE(at::allclose(local_after_first[0], local_after_first[1]));
}

// A rank that stops taking part (stalled or dead) makes the others fail within the collective
// timeout with an error that says what happened, instead of hanging.
TEST_F(DistGloo, StalledRankIsAnErrorWithinTheTimeout) {
  std::vector<at::Tensor> params{at::ones({10}).requires_grad_()};
  params[0].mutable_grad() = at::ones({10});
  std::string message;
  std::atomic<bool> rank0_done{false};
  const auto start = std::chrono::steady_clock::now();
  run_ranks(2, [&](int rank) {
    const DistContext ctx = file_group(dir.file("store"), rank, 2, 3s);
    if (rank == 1) {
      while (!rank0_done) std::this_thread::sleep_for(10ms);  // joined, then never reduces
      return;
    }
    try {
      GradientReducer reducer(params, ctx);
      reducer.reduce();
      message = "no error";
    } catch (const Error& e) {
      message = e.what();
    }
    rank0_done = true;
  });
  EXPECT_NE(message.find("rank 0 of 2: gradient all-reduce of bucket 1/1 failed"), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

// Mixed dtypes make separate buckets; a parameter without a gradient counts as zeros and receives
// the average; channels-last gradients keep their layout; any_rank is a logical OR over the ranks.
TEST_F(DistGloo, ReducerEdgeCases) {
  std::vector<std::vector<at::Tensor>> params(2);
  for (int r = 0; r < 2; ++r) {
    params[r] = {at::zeros({2, 3, 4, 4}).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(),
                 at::zeros({5}, at::kDouble).requires_grad_(), at::zeros({7}).requires_grad_()};
    params[r][0].mutable_grad() = at::full({2, 3, 4, 4}, float(r + 1)).contiguous(at::MemoryFormat::ChannelsLast);
    params[r][1].mutable_grad() = at::full({5}, double(10 * r), at::kDouble);
    if (r == 1) params[r][2].mutable_grad() = at::full({7}, 4.0f);  // rank 0 has no gradient here
  }
  std::vector<size_t> buckets(2);
  std::array<bool, 4> any{};  // not std::vector<bool>: its bits share words, and the ranks write concurrently
  run_ranks(2, [&](int rank) {
    const DistContext ctx = file_group(dir.file("store"), rank, 2);
    GradientReducer reducer(params[rank], ctx);
    buckets[rank] = reducer.num_buckets();
    reducer.reduce();
    any[rank] = any_rank(rank == 0, ctx);
    any[2 + rank] = any_rank(false, ctx);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(buckets[r], 3u);  // float, double, float: a dtype change closes a bucket
    EXPECT_TRUE(at::allclose(params[r][0].grad(), at::full({2, 3, 4, 4}, 1.5f)));
    EXPECT_TRUE(params[r][0].grad().is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(at::allclose(params[r][1].grad(), at::full({5}, 5.0, at::kDouble)));
    ASSERT_TRUE(params[r][2].grad().defined());
    EXPECT_TRUE(at::allclose(params[r][2].grad(), at::full({7}, 2.0f)));
    EXPECT_TRUE(any[r]);
    EXPECT_FALSE(any[2 + r]);
  }
}

// The training loop's Ctrl-C vote: each vote returns the previous one's OR over the ranks (false first),
// the same on every rank.
TEST_F(DistGloo, DeferredAnyRankReturnsThePreviousVote) {
  // rank 1 votes true in its second vote only; rank 0 in its fourth only.
  const std::vector<std::vector<bool>> votes{{false, false, false, true, false}, {false, true, false, false, false}};
  std::vector<std::vector<bool>> seen(2);
  run_ranks(2, [&](int rank) {
    DeferredAnyRank vote(file_group(dir.file("store"), rank, 2));
    for (bool v : votes[rank]) seen[rank].push_back(vote.vote(v));
  });
  const std::vector<bool> want{false, false, true, false, true};
  EXPECT_EQ(seen[0], want);
  EXPECT_EQ(seen[1], want);
  // One process: the flag itself, at once.
  DeferredAnyRank alone{DistContext{}};
  EXPECT_TRUE(alone.vote(true));
  EXPECT_FALSE(alone.vote(false));
}

TEST_F(DistGloo, MissingRankIsAClearErrorNotAHang) {
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)file_group(dir.file("store"), 0, 2, 3s);
    FAIL() << "rank 0 joined a 2-rank group alone";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not join within 3 s"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

TEST_F(DistGloo, TcpStoreRendezvousAndMissingRank) {
  DistEnv env;
  env.world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = free_port();
  // Both ranks through the real path: rank 0 hosts the TCPStore, rank 1 connects; then an all-reduce.
  std::array<bool, 2> stop{};  // one bool each (std::vector<bool> packs them into one word)
  run_ranks(2, [&](int rank) {
    DistEnv e = env;
    e.rank = e.local_rank = rank;
    const DistContext ctx = init(e, kCpu, 30s);
    stop[rank] = any_rank(rank == 1, ctx);
    std::vector<at::Tensor> t{at::full({3}, float(rank + 1))};
    GradientReducer none({}, ctx);  // no parameters: nothing to do
    none.reduce();
    barrier(ctx);
  });
  EXPECT_TRUE(stop[0]);
  EXPECT_TRUE(stop[1]);

  // Rank 0 alone: the store's server waits for rank 1 and gives up after the timeout.
  env.master_port = free_port();
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)init(env, kCpu, 3s);
    FAIL() << "rank 0 joined a 2-rank group alone";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not join within 3 s"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

namespace {
// The scratch folders (kestrel-rank<r>-<pid>) that ranks > 0 write into under the temporary folder.
std::vector<std::string> rank_scratch_folders(const std::string& tmp) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(tmp))
    if (entry.path().filename().string().rfind("kestrel-rank", 0) == 0) found.push_back(entry.path().string());
  return found;
}
}  // namespace

// kestrel train --nproc-per-node 2 end to end (Gloo on CPU): one run folder written by rank 0, the
// ranks share each epoch (5 images: 3 per rank, batches of 2), rank 1's scratch folder is gone afterwards,
// and a bad flag on the ranks fails the launch.
TEST_F(DistGloo, TrainTwoProcessesOneRunFolder) {
  namespace fs = std::filesystem;
  const std::string data = test::demo_subset(dir, 5);
  const std::string common = test::kestrel_binary() + " train --nproc-per-node 2 --cfg yolov5n --data " +
                             data + " --img 160 --device cpu --workers 1 --quiet --project " +
                             dir.file("runs");
  const std::string tmp = dir.file("tmp");
  fs::create_directories(tmp);
  // A multi-node job's NODE_RANK is named as unused; the command line's warnings come once (the launcher's),
  // not once more from every rank.
  const auto r = test::run_command("env -u WORLD_SIZE -u RANK -u MASTER_PORT NODE_RANK=1 TMPDIR=" + tmp + " " + common +
                                   " --batch 4 --epochs 2 --noval --rect --image-weights");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launcher: WARNING: NODE_RANK=1 in the environment is not used"), std::string::npos) << r.output;
  const auto warning = r.output.find("WARNING: --rect is incompatible with --image-weights");
  ASSERT_NE(warning, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("WARNING: --rect is incompatible", warning + 1), std::string::npos) << r.output;
  EXPECT_EQ(rank_scratch_folders(tmp), std::vector<std::string>{}) << "rank 1's scratch folder was left behind";
  EXPECT_NE(r.output.find("2 batches of 4 per epoch"), std::string::npos) << r.output;  // 3 images per rank
  EXPECT_TRUE(fs::exists(dir.file("runs/exp/weights/last.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("runs/exp/results.csv")));
  EXPECT_FALSE(fs::exists(dir.file("runs/exp2"))) << "a second rank made its own run folder";
  // One "epochs completed" line: only rank 0 prints.
  const auto first = r.output.find("epochs completed");
  EXPECT_NE(first, std::string::npos);
  EXPECT_EQ(r.output.find("epochs completed", first + 1), std::string::npos) << r.output;

  // Upstream's data-parallel spelling names one device per rank (--device 0,1 on GPUs): each rank takes its
  // entry, for the model and for its loader.
  std::string with_list = common;
  with_list.replace(with_list.find("--device cpu"), 12, "--device cpu,cpu");
  with_list.replace(with_list.find("--nproc-per-node"), 16, "--nproc_per_node");  // torchrun's other spelling
  const auto listed = test::run_command("env -u WORLD_SIZE -u RANK -u MASTER_PORT " + with_list +
                                        " --batch 4 --epochs 1 --noval --name listed");
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  // A failing rank's error reaches the user and the launcher's exit code is non-zero.
  const auto bad = test::run_command("env -u WORLD_SIZE -u RANK -u MASTER_PORT " + common + " --epochs 1 --batch 3");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("must be a multiple of WORLD_SIZE 2"), std::string::npos) << bad.output;
}

// A rank whose job never gathers (started alone here: rank 1 of 2, no rank 0) says after 15 s whom it waits
// for and where, instead of staying silent for the whole rendezvous timeout.
TEST_F(DistGloo, ARankWaitingAloneSaysSo) {
  const std::string port = std::to_string(free_port());
  const auto r = test::run_command("env -u LOCAL_RANK WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                                   " timeout -s KILL 40 " + test::kestrel_binary() + " train --cfg yolov5n --data " +
                                   test::demo_subset(dir, 4) + " --img 64 --batch 2 --epochs 1 --device cpu --project " +
                                   dir.file("runs"));
  EXPECT_EQ(r.exit_code, 137) << r.output;  // still waiting when timeout kills it
  EXPECT_NE(r.output.find("distributed: rank 1 of 2 still waiting for rank 0 and the others at MASTER_ADDR:MASTER_PORT=127.0.0.1:" +
                          port + " (up to 3600 s)"),
            std::string::npos)
      << r.output;
}

// A node's first rank that cannot index the training split (its only image is unreadable here) ends the
// node's other ranks with it, through the exchange that would have let them read its cache; they do not wait
// for it in a barrier. Ranks started by hand: no launcher stops them.
TEST_F(DistGloo, FirstRanksDataErrorEndsTheOthers) {
  std::filesystem::create_directories(dir.file("images/train"));
  test::write_file(dir.file("images/train/bad.jpg"), "not an image");
  test::write_file(dir.file("bad.yaml"), "path: " + dir.path() + "\ntrain: images/train\nval: images/train\nnc: 1\nnames: [a]\n");
  const std::string rank = "env WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port());
  const std::string train = " timeout -s KILL 120 " + test::kestrel_binary() + " train --cfg yolov5n --data " +
                            dir.file("bad.yaml") + " --img 64 --batch 2 --epochs 1 --device cpu --project " + dir.file("runs");
  const auto r = test::run_command(rank + " RANK=1 LOCAL_RANK=1" + train + " > " + dir.file("rank1.txt") + " 2>&1 & p=$!; " +
                                   rank + " RANK=0 LOCAL_RANK=0" + train + "; c0=$?; wait $p; echo \"codes $c0 $?\"");
  EXPECT_NE(r.output.find("codes 1 1"), std::string::npos) << r.output;
  std::ifstream in(dir.file("rank1.txt"));
  const std::string rank1((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(rank1.find("distributed: rank 1: a node's first rank could not index the training split"), std::string::npos)
      << rank1;
}

// The README's launch through torchrun (its agent hosts the store: TORCHELASTIC_USE_AGENT_STORE) runs
// unchanged: `torchrun --no-python --nproc-per-node 2 kestrel train ...`, here as the venv's
// `python -m torch.distributed.run`. The ranks share the epoch as under kestrel's own launcher.
TEST_F(DistGloo, TorchrunLaunchesKestrelTrain) {
  namespace fs = std::filesystem;
  const std::string data = test::demo_subset(dir, 5);
  const auto r = test::run_command(
      "env -u WORLD_SIZE -u RANK -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT OMP_NUM_THREADS=1 " +
      std::string(KESTREL_TEST_PYTHON) + " -m torch.distributed.run --no-python --nproc-per-node 2 --master-port " +
      std::to_string(free_port()) + " " + test::kestrel_binary() + " train --cfg yolov5n --data " + data +
      " --img 160 --device cpu --workers 1 --quiet --batch 4 --epochs 1 --noval --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 batches of 4 per epoch"), std::string::npos) << r.output;  // 3 images per rank
  EXPECT_TRUE(fs::exists(dir.file("runs/exp/weights/last.safetensors")));
  EXPECT_FALSE(fs::exists(dir.file("runs/exp2"))) << "a second rank made its own run folder";
}

// The mid-epoch checkpoint of 2 ranks with SyncBN resumes on 1 process: rank r takes every W-th
// sample of the epoch order, so batch positions (of the total batch) mean the same for any W.
TEST_F(DistGloo, SyncBnRunInterruptedOnTwoRanksResumesOnOne) {
  namespace fs = std::filesystem;
  const std::string data = test::demo_subset(dir, 4);
  const std::string env = "env -u WORLD_SIZE -u RANK -u MASTER_PORT ";
  const std::string tmp = dir.file("tmp");
  fs::create_directories(tmp);
  const auto first = test::run_command(env + "TMPDIR=" + tmp + " " + test::kestrel_binary() +
                                       " train --nproc-per-node 2 --sync-bn --cfg yolov5n --data " + data +
                                       " --img 160 --device cpu --workers 1 --quiet --project " + dir.file("runs") +
                                       " --batch 2 --epochs 2 --noval --interrupt-after 1");
  ASSERT_EQ(first.exit_code, 130) << first.output;  // stopped and saved, as by Ctrl-C
  EXPECT_EQ(rank_scratch_folders(tmp), std::vector<std::string>{}) << "rank 1's scratch folder was left behind";
  EXPECT_NE(first.output.find("Using SyncBatchNorm() in 57 layers"), std::string::npos) << first.output;  // yolov5n's BNs
  EXPECT_NE(first.output.find("2 batches of 2 per epoch"), std::string::npos) << first.output;
  const auto resumed = test::run_command(env + test::kestrel_binary() + " train --quiet --resume " + dir.file("runs/exp"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("Resuming with WORLD_SIZE 1 a run saved with WORLD_SIZE 2"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("from epoch 0, batch 1"), std::string::npos) << resumed.output;
  std::ifstream csv(dir.file("runs/exp/results.csv"));
  int rows = 0;
  for (std::string line; std::getline(csv, line);) rows += line.empty() ? 0 : 1;
  EXPECT_EQ(rows, 3) << "header + one row per epoch";
}

// --patience on two ranks: only rank 0 validates, so it decides, and every rank stops after the same
// epoch (a rank that trained on alone would wait forever in its next all-reduce). The run is made to
// stop by a saved best fitness no validation can reach (fitness is at most 1): resumed at epoch 0 on two
// ranks with --patience 1, epoch 1 is the first without improvement since the best epoch 0. Epoch 1 is
// also validated under --noval (train.py's possible_stop after epoch 0).
TEST_F(DistGloo, EarlyStopEndsEveryRank) {
  namespace fs = std::filesystem;
  const std::string data = test::demo_subset(dir, 4);
  const std::string env = "env -u WORLD_SIZE -u RANK -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT OMP_NUM_THREADS=1 ";
  const auto first = test::run_command(env + test::kestrel_binary() + " train --cfg yolov5n --data " + data +
                                       " --img 160 --device cpu --workers 1 --quiet --noplots --project " + dir.file("runs") +
                                       " --batch 2 --epochs 5 --noval --patience 1 --interrupt-after 1");
  ASSERT_EQ(first.exit_code, 130) << first.output;
  const std::string state_path = dir.file("runs/exp/weights/last.state.safetensors");
  train::TrainingState state = train::read_training_state(state_path);
  ASSERT_EQ(state.progression.epoch, 0);
  state.progression.best_fitness = 2.0;
  train::write_training_state(state_path, state);

  // `timeout`: a rank left training would hang the test rather than fail it.
  const auto resumed = test::run_command(env + "timeout 600 " + test::kestrel_binary() + " train --nproc-per-node 2 --resume " +
                                         dir.file("runs/exp"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("Resuming with WORLD_SIZE 2 a run saved with WORLD_SIZE 1"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("Stopping training early as no improvement observed in last 1 epochs. Best results observed at epoch 0,"),
            std::string::npos)
      << resumed.output;
  std::ifstream csv(dir.file("runs/exp/results.csv"));
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);)
    if (!line.empty()) rows.push_back(line);
  EXPECT_EQ(rows.size(), 3u) << "header + epochs 0 and 1";
  const train::TrainingState stopped = train::read_training_state(state_path);
  EXPECT_EQ(stopped.progression.epoch, 5) << "an early stop ends the run";
  EXPECT_EQ(stopped.progression.best_epoch, 0);
  const auto again = test::run_command(env + test::kestrel_binary() + " train --resume " + dir.file("runs/exp"));
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("this run already finished"), std::string::npos) << again.output;
}

}  // namespace
}  // namespace kestrel::dist
