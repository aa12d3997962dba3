#include "kestrel/train/cuda_graph_step.h"

#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/grad_mode.h>

#ifdef KESTREL_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kestrel/core/error.h"

namespace kestrel::train {

int64_t padded_target_rows(int64_t rows) {
  int64_t n = 32;
  while (n < rows) n *= 2;
  return n;
}

namespace {

// One shape's static buffers and, once captured, its graph and the graph's outputs.
struct Shape {
  at::Tensor images, targets, mask;  // [B, 3, H, W], [B, Mp, 5], [B, Mp] (rows past the batch's: masked)
  loss::YoloLoss::Result out;        // the captured step's outputs, rewritten by every replay
  double momentum = 0;               // of the last call (0 for micro-steps: they have none)
  int steady_calls = 0;              // consecutive calls with that momentum
  double graph_momentum = 0;         // the one the graph was captured with
#ifdef KESTREL_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

// image sizes, padded target rows, whether the step updates the weights
using ShapeKey = std::tuple<std::vector<int64_t>, int64_t, bool>;

loss::YoloLoss::Result copy_of(const loss::YoloLoss::Result& r) {
  return {r.total.detach().clone(), r.items.clone()};
}

// Autocast's cast cache off for a scope: casts inside a capture must be part of the graph.
class NoAutocastCache {
 public:
  NoAutocastCache() : previous_(at::autocast::is_autocast_cache_enabled()) { at::autocast::set_autocast_cache_enabled(false); }
  ~NoAutocastCache() { at::autocast::set_autocast_cache_enabled(previous_); }
  NoAutocastCache(const NoAutocastCache&) = delete;
  NoAutocastCache& operator=(const NoAutocastCache&) = delete;

 private:
  bool previous_;
};

}  // namespace

struct CudaGraphStep::Impl {
  TrainStep& step;
  c10::Device device;
  GraphStepOptions options;
  std::map<ShapeKey, Shape> shapes;
  int captured = 0;
  int64_t replays = 0;
#ifdef KESTREL_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> side;  // warm-up calls and captures
  c10::MempoolId_t pool{0, 0};                // one memory pool for every graph (replays never overlap)
#endif

  std::vector<const void*> gradient_memory;  // each trainable gradient's storage, fixed from construction

  Impl(TrainStep& s, const c10::Device& d, GraphStepOptions o) : step(s), device(d), options(o) {}

  // The gradients must be where the graphs write them: one replaced or freed since (an optimiser
  // zero_grad that sets them to none instead of TrainStep::zero_grad) would leave the graphs writing
  // memory nobody reads. Host metadata only: no synchronisation.
  void check_gradient_memory() const {
    const auto& params = step.trainable();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& g = params[i].grad();
      if (!g.defined() || g.data_ptr() != gradient_memory[i])
        fail("CUDA graph step: the gradient of trainable parameter ", i, " ", g.defined() ? "moved" : "was freed",
             " after the step was set up (zero gradients with TrainStep::zero_grad, which keeps their memory)");
    }
  }

  // The shape's slot for this batch (created on first sight), or nullptr when max_graphs are taken.
  Shape* slot(const at::Tensor& images, const at::Tensor& targets, bool update) {
    const int64_t rows = padded_target_rows(targets.size(1));
    const ShapeKey key{images.sizes().vec(), rows, update};
    auto it = shapes.find(key);
    if (it != shapes.end()) return &it->second;
    if (static_cast<int>(shapes.size()) >= options.max_graphs) return nullptr;
    Shape& s = shapes[key];
    s.images = at::empty_like(images);
    s.targets = at::zeros({targets.size(0), rows, targets.size(2)}, targets.options());
    s.mask = at::zeros({targets.size(0), rows}, targets.options().dtype(at::kBool));
    return &s;
  }

  // Copies the batch into the static buffers (on the current stream, before the step reads them).
  static void load(Shape& s, const at::Tensor& images, const at::Tensor& targets, const at::Tensor& mask) {
    torch::NoGradGuard no_grad;
    const int64_t m = targets.size(1);
    s.images.copy_(images);
    s.targets.narrow(1, 0, m).copy_(targets);
    s.mask.narrow(1, 0, m).copy_(mask);
    if (m < s.mask.size(1)) s.mask.narrow(1, m, s.mask.size(1) - m).zero_();
  }

  // Forward and backward, and the update when asked: the captured body, and the step of shapes without a slot.
  loss::YoloLoss::Result step_once(const at::Tensor& images, const at::Tensor& targets, const at::Tensor& mask,
                                   bool update, double momentum) {
    loss::YoloLoss::Result r = step.forward_backward(images, targets, mask);
    if (update) step.apply_update(momentum);
    return {r.total.detach(), r.items};
  }
  loss::YoloLoss::Result body(Shape& s, bool update) { return step_once(s.images, s.targets, s.mask, update, s.momentum); }

  bool ready(const Shape& s) const {
#ifdef KESTREL_WITH_CUDA
    return s.graph != nullptr;
#else
    (void)s;
    return false;
#endif
  }

  loss::YoloLoss::Result replay(Shape& s) {
#ifdef KESTREL_WITH_CUDA
    s.graph->replay();
    ++replays;
#endif
    return copy_of(s.out);
  }

#ifdef KESTREL_WITH_CUDA
  // Runs fn() on the side stream, ordered after the current stream's work (the loaded inputs) and
  // before its next.
  template <class Fn>
  void on_side_stream(Fn&& fn) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    if (!side) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    at::cuda::CUDAEvent inputs_ready, done;
    inputs_ready.record(current);
    inputs_ready.block(*side);
    {
      c10::cuda::CUDAStreamGuard on_side(*side);
      fn();
    }
    done.record(*side);
    done.block(current);
  }
#endif

  // A call of the body without capture: on the side stream when capturing is on (the warm-up calls
  // before a capture).
  loss::YoloLoss::Result eager(Shape& s, bool update) {
#ifdef KESTREL_WITH_CUDA
    if (options.capture) {
      loss::YoloLoss::Result r;
      on_side_stream([&] { r = body(s, update); });
      // Allocated on the side stream, used on the current one: not reused before that use is done.
      const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
      r.total.record_stream(current);
      r.items.record_stream(current);
      return r;
    }
#endif
    return body(s, update);
  }

  // Records the body as the shape's graph (running nothing), on the side stream.
  void capture(Shape& s, bool update) {
#ifdef KESTREL_WITH_CUDA
    if (pool == c10::MempoolId_t{0, 0}) pool = at::cuda::graph_pool_handle();
    on_side_stream([&] {
      NoAutocastCache no_cast_cache;
      // A re-capture (the momentum changed) keeps the old graph until the new one is complete: destroying
      // it first would drop the shared pool's last reference, and capture_begin on a pool marked for
      // release fails an internal assertion of the caching allocator.
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local mode: the loader's threads may use CUDA (pinned memory) while this one captures.
      graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      try {
        s.out = body(s, update);
      } catch (const std::exception& e) {
        // Leave capture mode and say which shape. An invalidated capture makes capture_end throw, possibly
        // before it stops routing allocations into the graphs' pool: stop that here if it did not.
        try {
          graph->capture_end();
        } catch (const std::exception&) {
          try {
            c10::cuda::CUDACachingAllocator::endAllocateToPool(device.index(), pool);
          } catch (const std::exception&) {  // capture_end had already ended it: keep the message below
          }
        }
        fail("CUDA graph capture of the training step failed (images ", s.images.sizes(), ", ", s.targets.size(1),
             " target rows, ", update ? "with" : "without", " the update): ", e.what());
      }
      graph->capture_end();
      s.graph = std::move(graph);
    });
    s.graph_momentum = s.momentum;
    ++captured;
#else
    (void)s;
    (void)update;
#endif
  }

  ~Impl() {
#ifdef KESTREL_WITH_CUDA
    // The static buffers are freed after this. A destructor must not throw: after an unrecoverable CUDA
    // error (illegal address, device assert) the synchronize throws again while that error unwinds, which
    // would end in std::terminate instead of the error's message.
    try {
      if (side) side->synchronize();
    } catch (...) {
    }
#endif
  }
};

CudaGraphStep::CudaGraphStep(TrainStep& step, const c10::Device& device, GraphStepOptions options)
    : impl_(std::make_unique<Impl>(step, device, options)) {
  if (options.capture && !device.is_cuda()) fail("--cuda-graph needs a CUDA device, not ", device.str());
#ifndef KESTREL_WITH_CUDA
  if (options.capture) fail("--cuda-graph: this kestrel was built without CUDA");
#endif
  if (options.warmup < 1 || options.max_graphs < 0) fail("CUDA graphs: warm-up must be >= 1 and max graphs >= 0");
  step.keep_gradient_memory();
  for (const auto& p : step.trainable()) impl_->gradient_memory.push_back(p.grad().data_ptr());
}

CudaGraphStep::~CudaGraphStep() = default;

loss::YoloLoss::Result CudaGraphStep::run(const at::Tensor& images, const at::Tensor& targets, const at::Tensor& mask,
                                          const StepSettings& settings, bool update) {
  Impl& m = *impl_;
  m.check_gradient_memory();
  if (update) m.step.set_learning_rates(settings.lr);  // outside the graph: the captured update reads them
  Shape* s = m.slot(images, targets, update);
  if (s == nullptr) return m.step_once(images, targets, mask, update, settings.momentum);  // more shapes than graphs
  Impl::load(*s, images, targets, mask);
  // Only updates depend on the momentum; a micro-step's graph serves any.
  const double momentum = update ? settings.momentum : 0.0;
  if (m.ready(*s) && s->graph_momentum == momentum) return m.replay(*s);
  s->steady_calls = s->momentum == momentum ? s->steady_calls + 1 : 1;
  s->momentum = momentum;
  if (m.options.capture && s->steady_calls > m.options.warmup) {
    m.capture(*s, update);  // records the step without running it ...
    return m.replay(*s);    // ... which the first replay does
  }
  return m.eager(*s, update);
}

int CudaGraphStep::graphs_captured() const { return impl_->captured; }
int64_t CudaGraphStep::replays() const { return impl_->replays; }

}  // namespace kestrel::train
