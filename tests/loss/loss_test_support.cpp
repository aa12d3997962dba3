#include "loss/loss_test_support.h"

#include <fstream>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace kestrel::test {
namespace {

template <typename T>
std::vector<T> values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

void write_raw(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(c.data_ptr()), c.nbytes());
}
at::Tensor read_raw(const std::string& path, at::IntArrayRef shape) {
  at::Tensor t = at::empty(shape, at::kDouble);
  std::ifstream(path, std::ios::binary).read(static_cast<char*>(t.data_ptr()), t.nbytes());
  return t;
}

}  // namespace

std::shared_ptr<models::Detect> make_head(int64_t nc, const std::vector<std::vector<double>>& anchors_px,
                                          const std::vector<double>& strides) {
  auto head = std::make_shared<models::Detect>(nc, anchors_px, std::vector<int64_t>(anchors_px.size(), 4), false);
  head->initialize(strides);
  return head;
}

at::Tensor all_real(const at::Tensor& t) { return at::ones({t.size(0), t.size(1)}, at::kBool); }
std::vector<bool> bools(const at::Tensor& t) { return values<bool>(t); }
std::vector<int64_t> longs(const at::Tensor& t) { return values<int64_t>(t); }

std::shared_ptr<models::Detect> three_level_head() {
  return make_head(4, {{2, 3, 3, 6, 6, 4}, {6, 12, 12, 9, 12, 24}, {23, 18, 31, 40, 75, 65}}, {8, 16, 32});
}

std::vector<at::Tensor> random_levels(int64_t b, const Shapes& shapes, double scale) {
  std::vector<at::Tensor> out;
  for (auto [ny, nx] : shapes) out.push_back(at::randn({b, 3, ny, nx, 9}) * scale);
  return out;
}

std::pair<at::Tensor, at::Tensor> random_targets(bool specials) {
  const int64_t B = 3, M = 8;
  at::Tensor t = at::rand({B, M, 5}) * 3 - 1, mask = at::zeros({B, M}, at::kBool);
  for (auto [b, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {2, 8}}) {
    mask[b].narrow(0, 0, n).fill_(true);
    at::Tensor real = t[b].narrow(0, 0, n);
    real.select(1, 0).copy_(at::randint(0, 4, {n}));
    real.narrow(1, 1, 2).copy_(at::rand({n, 2}));
    real.narrow(1, 3, 2).copy_(at::exp(at::rand({n, 2}) * std::log(40.0)) / 50);  // 0.02 .. 0.8
  }
  if (specials) {
    t[2][0].narrow(0, 1, 4).copy_(at::tensor({.5f, .25f, .3f, .2f}));   // integer grid centres on every level
    t[2][1].narrow(0, 1, 4).copy_(at::tensor({1.f, 0.f, .1f, .15f}));   // on the image border
    t[2][2].narrow(0, 1, 4).copy_(at::tensor({.5f, .25f, .28f, .22f}));  // near duplicate of row 0
    t[2][3].narrow(0, 1, 2).copy_(at::tensor({.375f, .625f}));          // fraction 0.5 on the middle level
  }
  t[0][7].fill_(std::numeric_limits<float>::quiet_NaN());
  return {t, mask};
}

RandomInputs::RandomInputs(uint64_t seed, const loss::LossOptions& hyp, const Shapes& shapes, bool specials)
    : shapes(shapes), hyp(hyp) {
  at::manual_seed(seed);
  levels = random_levels(3, shapes);
  std::tie(t, mask) = random_targets(specials);
}

at::Tensor with_garbage_padding(const at::Tensor& t, const at::Tensor& mask) {
  at::Tensor garbage = at::where(mask.unsqueeze(-1), t, at::randn_like(t) * 1e3);
  garbage[1][3].fill_(std::numeric_limits<float>::infinity());
  garbage[0][6].copy_(at::tensor({1.f, .5f, .5f, .1f, .1f}));  // a plausible box, but padding
  return garbage;
}

void expect_identical(const Evaluated& a, const Evaluated& b) {
  EXPECT_TRUE(at::equal(a.total, b.total));
  EXPECT_TRUE(at::equal(a.items, b.items));
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(at::equal(a.grads[i], b.grads[i])) << "level " << i;
}

loss::LossOptions focal_smoothing_weights() {
  loss::LossOptions o;
  o.box = 0.07, o.cls = 0.4, o.obj = 0.9, o.cls_pw = 1.3, o.obj_pw = 0.8, o.anchor_t = 3.0;
  o.fl_gamma = 1.5, o.label_smoothing = 0.1;
  return o;
}

const char* const kPythonLossPrelude = R"PY(
import json, numpy as np, torch
import torch.nn.functional as F
meta = json.load(open(DIR + '/meta.json'))
B, M, nc, na, img = meta['B'], meta['M'], meta['nc'], meta['na'], meta['img_size']
shapes, strides, h, f32 = meta['shapes'], meta['strides'], meta['hyp'], np.float32
nl = len(shapes)
levels = [torch.from_numpy(np.fromfile(f'{DIR}/level{i}.bin', dtype=f32).reshape(B, na, ny, nx, nc + 5))
          .double().requires_grad_() for i, (ny, nx) in enumerate(shapes)]
targets = np.fromfile(DIR + '/targets.bin', dtype=f32).reshape(B, M, 5)
mask = np.fromfile(DIR + '/mask.bin', dtype=np.uint8).reshape(B, M).astype(bool)
anchors = np.fromfile(DIR + '/anchors.bin', dtype=f32).reshape(nl, na, 2)
gain_box, gain_cls = h['box'] * 3 / nl, h['cls'] * nc / 80 * 3 / nl
gain_obj = h['obj'] * (img / 640) ** 2 * 3 / nl
balance = [4.0, 1.0, 0.4] if nl == 3 else [4.0, 1.0, 0.25, 0.06, 0.02][:nl]
cp, cn = 1 - 0.5 * h['label_smoothing'], 0.5 * h['label_smoothing']

def bce(x, y, pw):
    loss = -(pw * y * F.logsigmoid(x) + (1 - y) * F.logsigmoid(-x))
    if h['fl_gamma'] > 0:
        p = torch.sigmoid(x)
        pt = y * p + (1 - y) * (1 - p)
        loss = loss * (y * 0.25 + (1 - y) * 0.75) * (1 - pt) ** h['fl_gamma']
    return loss
def ciou(p, t, eps=1e-7):
    (px, py, pw, ph), (tx, ty, tw, th) = p, [torch.tensor(float(v), dtype=torch.float64) for v in t]
    iw = (torch.minimum(px + pw / 2, tx + tw / 2) - torch.maximum(px - pw / 2, tx - tw / 2)).clamp(min=0)
    ih = (torch.minimum(py + ph / 2, ty + th / 2) - torch.maximum(py - ph / 2, ty - th / 2)).clamp(min=0)
    iou = iw * ih / (pw * ph + tw * th - iw * ih + eps)
    cw = torch.maximum(px + pw / 2, tx + tw / 2) - torch.minimum(px - pw / 2, tx - tw / 2)
    ch = torch.maximum(py + ph / 2, ty + th / 2) - torch.minimum(py - ph / 2, ty - th / 2)
    rho2 = (px - tx) ** 2 + (py - ty) ** 2
    v = 4 / np.pi ** 2 * (torch.atan(tw / th) - torch.atan(pw / ph)) ** 2
    with torch.no_grad():
        alpha = v / (v - iou + 1 + eps)
    return iou - rho2 / (cw ** 2 + ch ** 2 + eps) - v * alpha

# positives[i]: level i's (b, a, gj, gi, target box (x, y, w, h) in grid units relative to the cell, class).
# Box loss 1 - CIoU and class BCE averaged over them, objectness BCE against the CIoU clamped at 0 (a cell
# reached twice keeps the larger), balanced; total = sum of the gained items x B, and its gradients.
def write_loss(positives):
    lbox = lobj = lcls = torch.zeros((), dtype=torch.float64)
    for i, p in enumerate(levels):
        best, box_sum, cls_sum = {}, 0, 0
        for b, a, gj, gi, tb, c in positives[i]:
            row = p[b, a, gj, gi]
            s = torch.sigmoid(row[:4])
            pb = (s[0] * 2 - 0.5, s[1] * 2 - 0.5, (s[2] * 2) ** 2 * float(anchors[i, a, 0]), (s[3] * 2) ** 2 * float(anchors[i, a, 1]))
            io = ciou(pb, tb)
            box_sum = box_sum + (1 - io)
            best[(b, a, gj, gi)] = max(best.get((b, a, gj, gi), 0.0), max(io.item(), 0.0))
            for k in range(nc):
                cls_sum = cls_sum + bce(row[5 + k], cp if k == c else cn, h['cls_pw'])
        n = len(positives[i])
        if n: lbox = lbox + box_sum / n
        if n and nc > 1: lcls = lcls + cls_sum / (n * nc)
        tobj = torch.zeros(p.shape[:4], dtype=torch.float64)
        for key, v in best.items(): tobj[key] = v
        lobj = lobj + bce(p[..., 4], tobj, h['obj_pw']).mean() * balance[i]
        print(f'level {i}: {n} positives, {len(best)} cells')
    items = torch.stack([lbox * gain_box, lobj * gain_obj, lcls * gain_cls])
    total = items.sum() * B
    total.backward()
    np.array([total.item()] + items.tolist(), dtype=np.float64).tofile(DIR + '/result.bin')
    for i, p in enumerate(levels): p.grad.numpy().astype(np.float64).tofile(f'{DIR}/grad{i}.bin')
    print('reference', total.item(), items.tolist())
)PY";

void expect_matches_script(const RandomInputs& c, const Evaluated& e, const std::string& defines,
                           const std::string& script, double rtol) {
  TempDir dir;
  for (size_t i = 0; i < c.levels.size(); ++i) write_raw(dir.file("level" + std::to_string(i) + ".bin"), c.levels[i]);
  write_raw(dir.file("targets.bin"), c.t);
  write_raw(dir.file("mask.bin"), c.mask.to(at::kByte));
  write_raw(dir.file("anchors.bin"), c.head->anchors());
  nlohmann::json shapes = nlohmann::json::array();
  for (auto [ny, nx] : c.shapes) shapes.push_back({ny, nx});
  std::vector<int64_t> strides;  // whole numbers in Python too (upstream sizes a tensor with them)
  for (double s : c.head->strides()) strides.push_back(std::lround(s));
  const loss::LossOptions& hyp = c.hyp;
  const nlohmann::json meta = {{"B", c.t.size(0)}, {"M", c.t.size(1)}, {"nc", c.head->nc()},
                               {"na", c.head->num_anchors()}, {"img_size", RandomInputs::kImgSize},
                               {"shapes", shapes}, {"strides", strides},
                               {"hyp", {{"box", hyp.box}, {"cls", hyp.cls}, {"cls_pw", hyp.cls_pw}, {"obj", hyp.obj},
                                        {"obj_pw", hyp.obj_pw}, {"anchor_t", hyp.anchor_t}, {"fl_gamma", hyp.fl_gamma},
                                        {"label_smoothing", hyp.label_smoothing}}}};
  write_file(dir.file("meta.json"), meta.dump());
  const CommandResult r = run_python(defines + "DIR = '" + dir.path() + "'\n" + script);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const at::Tensor ref = read_raw(dir.file("result.bin"), {4});  // total, box, obj, cls
  EXPECT_NEAR(e.total.item<double>(), ref[0].item<double>(), rtol * ref[0].item<double>()) << r.output;
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(e.items[k].item<double>(), ref[k + 1].item<double>(), rtol * ref[k + 1].item<double>()) << k;
  for (size_t i = 0; i < c.levels.size(); ++i) {
    const at::Tensor g = read_raw(dir.file("grad" + std::to_string(i) + ".bin"), c.levels[i].sizes());
    const double tol = rtol * g.abs().max().item<double>();
    EXPECT_LE((e.grads[i].to(at::kDouble) - g).abs().max().item<double>(), tol) << "level " << i;
  }
}

}  // namespace kestrel::test
