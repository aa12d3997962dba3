// tools/import_pt.py and tools/export_state_dict.py: upstream YOLOv5/YOLOv7 checkpoints into kestrel
// weights and back to a plain state dict.
//
// The upstream-like checkpoints are made here, without upstream code: a Python script registers
// stand-in modules `models.yolo` / `models.common` (Model, Conv, C3, Detect, IDetect, ...), builds an
// nn.Module tree whose state_dict keys are those of kestrel's own model (read from a kestrel weights
// file written by the C++ code), fills it with random values, halves it and torch.save()s a dict like
// upstream's train.py does. The import runs in a fresh process where those classes do not exist.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "kestrel/core/safetensors.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/weights_file.h"
#include "test_support.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// argv: kestrel_weights out.pt ref_ema.safetensors ref_model.safetensors keys_ema.txt [--old-anchor-grid]
// [--dict-names] [--payload MARKER]
constexpr const char* kMakeCheckpoint = R"PY(
import argparse, collections, json, os, sys, types
import numpy as np, torch, torch.nn as nn, yaml
from safetensors.torch import save_file

ap = argparse.ArgumentParser()
for name in ("kestrel", "out", "ref_ema", "ref_model", "keys_ema"):
    ap.add_argument(name)
ap.add_argument("--old-anchor-grid", action="store_true")  # YOLOv5 <= 5.0: Detect.anchor_grid is a buffer
ap.add_argument("--dict-names", action="store_true")       # YOLOv5 >= 6.2: names is {0: 'person', ...}
ap.add_argument("--payload")                               # code that would touch this file when unpickled
ap.add_argument("--act")  # leaky: every Conv's act is LeakyReLU(0.1) (YOLOv5 < 4.0); mixed: the first is Hardswish
a = ap.parse_args()

with open(a.kestrel, "rb") as f:  # keys in kestrel's (= PyTorch's) state_dict order, as stored
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
meta = header.pop("__metadata__")
shapes = collections.OrderedDict((k, (tuple(v["shape"]), v["dtype"]))
                                 for k, v in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]))
cfg = yaml.safe_load(meta["model_yaml"])
names = json.loads(meta["names"])
cfg["nc"] = len(names)  # upstream's Model(cfg, nc=...) overrides the YAML's nc this way
layer_types = [row[2].split(".")[-1] for row in cfg["backbone"] + cfg["head"]]

# Stand-ins for upstream's model classes, under upstream's module names.
pkg, yolo, common = (types.ModuleType(n) for n in ("models", "models.yolo", "models.common"))
pkg.yolo, pkg.common = yolo, common
sys.modules.update({"models": pkg, "models.yolo": yolo, "models.common": common})
def make_class(module, name):
    cls = type(name, (nn.Module,), {"forward": lambda self, x: x})
    cls.__module__, cls.__qualname__ = module.__name__, name
    setattr(module, name, cls)
    return cls
HEADS = ("Detect", "IDetect")
for n in set(layer_types) | {"Generic"}:
    make_class(yolo if n in HEADS else common, n)
Model = make_class(yolo, "Model")

class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + a.payload,))

tree = collections.OrderedDict()  # module path -> its own tensors
for key, (shape, dtype) in shapes.items():
    path, leaf = key.rsplit(".", 1)
    tree.setdefault(path, []).append((leaf, shape, dtype))
gen = torch.Generator().manual_seed(0)
def rand(shape, dtype):
    if dtype.startswith("I"):
        return torch.randint(0, 1000, shape, generator=gen, dtype=torch.int64)
    return torch.randn(shape, generator=gen) * 0.5

def new_module(path, entries):
    leaves = {leaf: shape for leaf, shape, _ in entries}
    parts = path.split(".")
    if {"running_mean", "running_var"} <= set(leaves):
        m = nn.BatchNorm2d(leaves["weight"][0])
    elif "weight" in leaves and set(leaves) <= {"weight", "bias"} and len(leaves["weight"]) == 4:
        w = leaves["weight"]
        m = nn.Conv2d(w[1], w[0], w[2:], bias="bias" in leaves)
    elif len(parts) == 2 and parts[0] == "model":
        t = layer_types[int(parts[1])]
        m = getattr(yolo if t in HEADS else common, t)()
    else:
        m = common.Generic()
    for leaf, shape, dtype in entries:
        t = rand(shape, dtype)
        if isinstance(m, (nn.Conv2d, nn.BatchNorm2d)):
            if leaf == "num_batches_tracked":
                m.num_batches_tracked = t
            else:
                getattr(m, leaf).data = t
        elif leaf in ("anchors", "anchor_grid"):
            m.register_buffer(leaf, t)
        else:
            m.register_parameter(leaf, nn.Parameter(t))
    return m

def build():
    root = Model()
    modules = {"": root}
    def get(path):
        if path not in modules:
            parent, _, name = path.rpartition(".")
            m = nn.Sequential() if path == "model" else new_module(path, tree.get(path, []))
            get(parent).add_module(name, m)
            modules[path] = m
        return modules[path]
    for path in tree:
        get(path)
    head = modules["model.%d" % (len(layer_types) - 1)]
    head.register_buffer("scratch", torch.ones(3), persistent=False)  # not part of state_dict()
    head.register_buffer("unset", None)                               # neither
    head.stride = torch.tensor([8.0, 16.0, 32.0])
    head.grid = [torch.zeros(1)] * 3
    if a.old_anchor_grid:
        head.register_buffer("anchor_grid", head.anchors.clone().view(3, 1, -1, 1, 1, 2))
    root.yaml, root.yaml_file = cfg, meta["model_name"] + ".yaml"
    root.names = dict(enumerate(names)) if a.dict_names else names
    root.nc, root.hyp, root.stride = len(names), {"lr0": 0.01, "box": 0.05}, head.stride
    root.device = torch.device("cpu")
    if a.payload:
        root.notes = Payload()
    if a.act:  # upstream's Conv holds conv, bn and act
        convs = [m for m in modules.values() if isinstance(getattr(m, "conv", None), nn.Conv2d)]
        for i, m in enumerate(convs):
            m.act = nn.Hardswish() if a.act == "mixed" and i == 0 else nn.LeakyReLU(0.1)
    return root

ema, model = build().half(), build().half()
for m in (ema, model):
    missing = [k for k in shapes if k not in m.state_dict()]
    assert not missing, missing[:5]
opt = torch.optim.SGD(list(model.parameters()), lr=0.01, momentum=0.9)
ckpt = {"epoch": 3, "best_fitness": np.float64(0.25), "model": model, "ema": ema, "updates": 120,
        "optimizer": opt.state_dict(), "opt": argparse.Namespace(img_size=[640, 640], weights="yolov5n.pt"),
        "git": {"branch": "master"}, "date": "2024-01-01T00:00:00"}
if a.payload:
    ckpt["opt"] = Payload()
torch.save(ckpt, a.out)
for m, ref in ((ema, a.ref_ema), (model, a.ref_model)):
    save_file({k: v.float() if v.is_floating_point() else v for k, v in m.state_dict().items() if k in shapes}, ref)
with open(a.keys_ema, "w") as f:
    f.write("\n".join(k for k in ema.state_dict() if k in shapes) + "\n")
)PY";

// argv: dir marker. Writes payload-only checkpoints: evil.pt (torch.save of a dict whose 'model' runs
// os.system when unpickled normally), evil_raw.pt (a zip whose data.pkl is a hand-written protocol-0
// pickle: GLOBAL os.system + REDUCE), evil_eval.pt (builtins.eval inside an otherwise plain dict).
constexpr const char* kMakePayloads = R"PY(
import os, sys, zipfile, torch
d, marker = sys.argv[1], sys.argv[2]
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + marker,))
class EvalPayload:
    def __reduce__(self):
        return (eval, ("open(%r, 'w')" % marker,))
torch.save({"epoch": 1, "model": Payload(), "ema": None}, os.path.join(d, "evil.pt"))
torch.save({"epoch": 1, "model": EvalPayload(), "ema": EvalPayload()}, os.path.join(d, "evil_eval.pt"))
with zipfile.ZipFile(os.path.join(d, "evil_raw.pt"), "w") as z:
    z.writestr("evil_raw/data.pkl", b"cos\nsystem\n(S'touch " + marker.encode() + b"'\ntR.")
    z.writestr("evil_raw/version", "3\n")
)PY";

std::string python() { return KESTREL_TEST_PYTHON; }

test::CommandResult python_file(const test::TempDir& dir, const std::string& name, const std::string& script,
                                const std::string& args) {
  test::write_file(dir.file(name), script);
  return test::run_command(python() + " " + dir.file(name) + " " + args);
}

test::CommandResult import_pt(const std::string& args) {
  return test::run_command(python() + " tools/import_pt.py " + args);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// A kestrel weights file of `cfg` with random-free (freshly built) weights: the key list and shapes.
void write_kestrel_weights(const std::string& path, const std::string& cfg, std::vector<std::string> names) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(cfg)),
                                   static_cast<int>(names.size()));
  models::save_model_weights(path, *model, models::describe_config(cfg, std::move(names)));
}

// Every tensor of the loaded kestrel model equals the reference (the checkpoint's fp16 values, widened).
void expect_equal_to_reference(const models::LoadedModel& loaded, const std::string& ref_path) {
  const SafetensorsContents ref = load_safetensors(ref_path);
  const auto got = models::state_dict(*loaded.model);
  ASSERT_EQ(got.size(), ref.tensors.size());
  std::map<std::string, at::Tensor> by_name(ref.tensors.begin(), ref.tensors.end());
  for (const auto& [name, t] : got) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const at::Tensor& r = by_name.at(name);
    EXPECT_EQ(t.sizes(), r.sizes()) << name;
    EXPECT_TRUE(at::equal(t, r.to(t.scalar_type()))) << name;
  }
}

struct Fixture {
  test::TempDir dir;
  std::string kestrel = dir.file("kestrel.safetensors"), pt = dir.file("upstream.pt");
  std::string ref_ema = dir.file("ref_ema.safetensors"), ref_model = dir.file("ref_model.safetensors");
  std::string keys = dir.file("keys_ema.txt");

  Fixture(const std::string& cfg, const std::vector<std::string>& names, const std::string& flags) {
    write_kestrel_weights(kestrel, cfg, names);
    const auto made = python_file(dir, "make_ckpt.py", kMakeCheckpoint,
                                  kestrel + " " + pt + " " + ref_ema + " " + ref_model + " " + keys + " " + flags);
    EXPECT_EQ(made.exit_code, 0) << made.output;
  }
};

TEST(ImportPt, YoloV5CheckpointLoadsIntoKestrelWithEqualTensors) {
  // YOLOv5 <= 5.0 style Detect (anchor_grid buffer, dropped on import), names as a dict (>= 6.2).
  Fixture f("yolov5n", {"person", "bicycle", "car"}, "--old-anchor-grid --dict-names");
  const std::string out = f.dir.file("imported.safetensors");
  const auto r = import_pt(f.pt + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("'ema'"), std::string::npos) << r.output;  // the EMA model by default
  EXPECT_NE(r.output.find("nc: 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model yaml: yolov5n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("person, bicycle, car"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.24.anchor_grid"), std::string::npos) << r.output;

  const models::LoadedModel loaded = models::load_model_weights(out);
  EXPECT_EQ(loaded.info.model_name, "yolov5n");
  EXPECT_EQ(loaded.info.names, (std::vector<std::string>{"person", "bicycle", "car"}));
  EXPECT_EQ(loaded.info.extra.at("epoch"), "3");
  expect_equal_to_reference(loaded, f.ref_ema);

  // Keys in the file come in the order upstream's module.state_dict() gives them.
  std::vector<std::string> file_order;
  for (const auto& [name, t] : load_safetensors(out).tensors) file_order.push_back(name);
  EXPECT_EQ(file_order, read_lines(f.keys));

  // --model takes the raw model instead of the EMA.
  const std::string raw = f.dir.file("raw.safetensors");
  const auto r2 = import_pt(f.pt + " " + raw + " --model");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  expect_equal_to_reference(models::load_model_weights(raw), f.ref_model);
}

// Checkpoints before YOLOv5 v4.0 (and YOLOv3 v9.5.0's) hold their activation in the Conv modules, not in
// the model YAML: it is written into the imported YAML (kestrel built SiLU, boxes 26 px off); layers of
// several activations that the YAML does not name are refused.
TEST(ImportPt, ActivationOfTheCheckpointsLayersGoesIntoTheYaml) {
  Fixture f("yolov5n", {"person"}, "--act leaky");
  const std::string out = f.dir.file("leaky.safetensors");
  const auto r = import_pt(f.pt + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("activation: nn.LeakyReLU(0.1)"), std::string::npos) << r.output;
  const models::LoadedModel loaded = models::load_model_weights(out);
  EXPECT_NE(loaded.info.model_yaml.find("\nactivation: nn.LeakyReLU(0.1)\n"), std::string::npos) << loaded.info.model_yaml;
  expect_equal_to_reference(loaded, f.ref_ema);

  Fixture mixed("yolov5n", {"person"}, "--act mixed");
  const auto m = import_pt(mixed.pt + " " + mixed.dir.file("mixed.safetensors"));
  EXPECT_EQ(m.exit_code, 1) << m.output;
  EXPECT_NE(m.output.find("the model's layers use nn.Hardswish(), nn.LeakyReLU(0.1), and its model.yaml names no activation"),
            std::string::npos) << m.output;
}

TEST(ImportPt, YoloV7IDetectCheckpointKeepsAnchorGrid) {
  Fixture f("yolov7-tiny", {"cat", "dog"}, "");
  const std::string out = f.dir.file("imported.safetensors");
  const auto r = import_pt(f.pt + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("dropped"), std::string::npos) << r.output;
  const models::LoadedModel loaded = models::load_model_weights(out);
  EXPECT_EQ(loaded.info.model_name, "yolov7-tiny");
  EXPECT_EQ(loaded.info.names, (std::vector<std::string>{"cat", "dog"}));
  expect_equal_to_reference(loaded, f.ref_ema);
}

TEST(ImportPt, CodeInThePickleIsNeverRun) {
  test::TempDir dir;
  const std::string marker = dir.file("pwned");
  const auto made = python_file(dir, "payloads.py", kMakePayloads, dir.path() + " " + marker);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  for (const char* name : {"evil.pt", "evil_eval.pt", "evil_raw.pt"}) {
    const auto r = import_pt(dir.file(name) + " " + dir.file("out.safetensors"));
    EXPECT_NE(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_NE(r.output.find(dir.file(name)), std::string::npos) << r.output;  // the error names the file
    EXPECT_FALSE(fs::exists(marker)) << name << " ran its payload: " << r.output;
    EXPECT_FALSE(fs::exists(dir.file("out.safetensors")));
  }

  // A payload inside an otherwise valid checkpoint (a model attribute and the 'opt' entry): imported, inert.
  Fixture f("yolov5n", {"a"}, "--payload " + marker);
  const auto r = import_pt(f.pt + " " + f.dir.file("ok.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(marker)) << r.output;
  expect_equal_to_reference(models::load_model_weights(f.dir.file("ok.safetensors")), f.ref_ema);

  // The payload is real: an unrestricted torch.load runs it.
  const auto loaded = test::run_python("import torch\ntorch.load('" + dir.file("evil.pt") + "', weights_only=False)\n");
  EXPECT_TRUE(fs::exists(marker)) << loaded.output;
}

// Importing `checkpoint` fails with exit code 1 and an error naming it and saying `message`, not a traceback.
void expect_import_error(const std::string& checkpoint, const std::string& out, const std::string& message) {
  const auto r = import_pt(checkpoint + " " + out);
  EXPECT_EQ(r.exit_code, 1) << checkpoint << ": " << r.output;
  EXPECT_NE(r.output.find(checkpoint + ": "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << checkpoint << ": " << r.output;
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
}

TEST(ImportPt, GarbageAndWrongFilesGiveClearErrors) {
  test::TempDir dir;
  const std::string out = dir.file("out.safetensors");
  test::write_file(dir.file("garbage.pt"), "this is not a checkpoint\n");
  auto r = import_pt(dir.file("garbage.pt") + " " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(dir.file("garbage.pt") + ": not a PyTorch checkpoint"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;

  r = import_pt(dir.file("missing.pt") + " " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing.pt: no such file"), std::string::npos) << r.output;

  const auto made = test::run_python(
      "import torch, zipfile, collections\n"
      "torch.save({'epoch': 1, 'optimizer': None}, '" + dir.file("nomodel.pt") + "')\n"
      "torch.save(collections.OrderedDict(w=torch.ones(2)), '" + dir.file("state_dict.pt") + "')\n"
      "torch.save({'model': torch.ones(2), 'epoch': 1}, '" + dir.file("tensor.pt") + "')\n"
      "with zipfile.ZipFile('" + dir.file("plain.zip") + "', 'w') as z: z.writestr('a.txt', 'hi')\n");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nomodel.pt", "no model under 'model'"},
      {"state_dict.pt", "a bare state_dict"},
      {"tensor.pt", "'model' is not a model object"},
      {"plain.zip", "not a torch checkpoint"},
  };
  for (const auto& [name, message] : cases) expect_import_error(dir.file(name), out, message);
  EXPECT_FALSE(fs::exists(out));
}

// Damaged or crafted checkpoints found by a black-box audit: each an error naming the file, never a traceback
// (nor 20 GB of memory): a zip member with a bad CRC, an expanded (stride-0) view of a million elements over a
// one-element storage, nc 1e10 without class names, a model YAML that contains itself, NaN weights (which
// kestrel would refuse to load).
TEST(ImportPt, DamagedAndCraftedCheckpointsAreClearErrors) {
  test::TempDir dir;
  const auto made = test::run_python(
      "import struct, sys, types, zipfile, torch, torch.nn as nn\n"
      "pkg, yolo = types.ModuleType('models'), types.ModuleType('models.yolo')\n"
      "sys.modules.update({'models': pkg, 'models.yolo': yolo})\n"
      "class Model(nn.Module):\n"
      "    pass\n"
      "Model.__module__ = 'models.yolo'\n"
      "yolo.Model = Model\n"
      "def save(name, yaml, buffer, names=None):\n"
      "    m = Model()\n"
      "    m.register_buffer('b', buffer)\n"
      "    m.yaml, m.names = yaml, names\n"
      "    torch.save({'model': m, 'epoch': 1}, '" + dir.file("") + "' + name)\n"
      "cfg = {'nc': 1, 'backbone': [], 'head': []}\n"
      "save('good.pt', cfg, torch.zeros(2), ['a'])\n"
      "save('expanded.pt', cfg, torch.zeros(1).expand(1 << 20), ['a'])\n"
      "m = Model()\n"  // v7.0's Detect.anchor_grid after an eval forward: an expanded view in a list attribute
      "m.register_buffer('b', torch.zeros(2))\n"
      "m.yaml, m.names, m.anchor_grid = cfg, ['a'], [torch.zeros(1, 3, 1, 1, 2).expand(1, 3, 80, 80, 2)]\n"
      "torch.save({'model': m, 'epoch': 1}, '" + dir.file("") + "' + 'expanded_attr.pt')\n"
      "save('huge_nc.pt', {'nc': 10 ** 10, 'backbone': [], 'head': []}, torch.zeros(2))\n"
      "save('nan.pt', cfg, torch.tensor([0.0, float('nan')]), ['a'])\n"
      "save('head_dict.pt', {'nc': 1, 'backbone': [], 'head': {'x': 1}}, torch.zeros(2), ['a'])\n"
      "loop = {'backbone': [], 'head': []}\n"
      "loop['me'] = loop\n"
      "save('loop.pt', loop, torch.zeros(2), ['a'])\n"
      "with zipfile.ZipFile('" + dir.file("good.pt") + "') as z:\n"
      "    info = [i for i in z.infolist() if i.filename.endswith('/data.pkl')][0]\n"
      "data = bytearray(open('" + dir.file("good.pt") + "', 'rb').read())\n"
      "n, extra = struct.unpack('<HH', data[info.header_offset + 26:info.header_offset + 30])\n"
      "data[info.header_offset + 30 + n + extra + 5] ^= 0xFF\n"
      "open('" + dir.file("crc.pt") + "', 'wb').write(bytes(data))\n"
      "with zipfile.ZipFile('" + dir.file("good.pt") + "') as z:\n"
      "    entries = [(i.filename, z.read(i)) for i in z.infolist()]\n"
      "n = 30000  # {'model': [[[...]]]} 30,000 lists deep, written as pickle opcodes (pickle itself stops at 1,000)\n"
      "deep = b'\\x80\\x02}X\\x05\\x00\\x00\\x00model' + b']' * n + b'a' * (n - 1) + b's.'\n"
      "with zipfile.ZipFile('" + dir.file("deep.pt") + "', 'w') as z:\n"
      "    for name, data in entries: z.writestr(name, deep if name.endswith('/data.pkl') else data)\n");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"crc.pt", "damaged zip archive (BadZipFile"},
      {"expanded.pt", "tensor view of 1048576 elements over a storage of 1 (an expanded view)"},
      {"huge_nc.pt", "model.yaml says nc=10000000000, above the limit of 1000000 classes"},
      {"loop.pt", "model.yaml is nested more than 50 levels deep (or contains itself)"},
      {"nan.pt", "tensor b holds NaN or infinite values"},
      {"head_dict.pt", "model.yaml's 'head' is not a list of layers"},
      {"deep.pt", "'model' is not a model object ([[[[[[[...]]]]]]])"},
  };
  for (const auto& [name, message] : cases) expect_import_error(dir.file(name), dir.file("out.safetensors"), message);
  // An expanded view outside the state dict (v7.0's anchor_grid cache) is not read: the file imports as the
  // same file without it.
  const auto good = import_pt(dir.file("good.pt") + " " + dir.file("good.safetensors"));
  const auto with_cache = import_pt(dir.file("expanded_attr.pt") + " " + dir.file("cache.safetensors"));
  ASSERT_EQ(good.exit_code, 0) << good.output;
  EXPECT_EQ(with_cache.exit_code, 0) << with_cache.output;
  EXPECT_EQ(with_cache.output.find("expanded view"), std::string::npos) << with_cache.output;
  EXPECT_EQ(fs::exists(dir.file("cache.safetensors")), fs::exists(dir.file("good.safetensors")));
}

// Outputs that cannot be written (no such folder, a folder of that name) are errors naming them, with no
// temporary file left behind, for both tools.
TEST(ImportPt, UnwritableOutputsAreErrorsNamingThem) {
  Fixture f("yolov5n", {"person", "car"}, "");
  fs::create_directories(f.dir.file("taken.safetensors"));
  for (const std::string& out : {f.dir.file("no/such/x.safetensors"), f.dir.file("taken.safetensors")}) {
    const auto r = import_pt(f.pt + " " + out);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("error: " + out + ": cannot write"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out + ".tmp"));
  }
  const std::string imported = f.dir.file("imported.safetensors");
  ASSERT_EQ(import_pt(f.pt + " " + imported).exit_code, 0);
  for (const std::string& args : {f.dir.file("no/such/sd.pt"), f.dir.file("sd.pt") + " --yaml " + f.dir.file("no/such/m.yaml")}) {
    const auto r = test::run_command(python() + " tools/export_state_dict.py " + imported + " " + args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("no/such/"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(": cannot write"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
  }
}

TEST(ImportPt, ExportStateDictLoadsWithWeightsOnlyAndMatches) {
  Fixture f("yolov5n", {"person", "car"}, "");
  const std::string imported = f.dir.file("imported.safetensors"), sd = f.dir.file("sd.pt");
  ASSERT_EQ(import_pt(f.pt + " " + imported).exit_code, 0);
  const auto e = test::run_command(python() + " tools/export_state_dict.py " + imported + " " + sd + " --yaml " +
                                   f.dir.file("model.yaml"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto check = test::run_python(
      "import collections, torch\n"
      "from safetensors.torch import load_file\n"
      "sd = torch.load('" + sd + "', weights_only=True)\n"
      "ref = load_file('" + f.ref_ema + "')\n"
      "assert isinstance(sd, collections.OrderedDict), type(sd)\n"
      "keys = open('" + f.keys + "').read().split()\n"
      "assert list(sd) == keys, (list(sd)[:5], keys[:5])\n"
      "for k, v in sd.items():\n"
      "    assert v.dtype == ref[k].dtype and torch.equal(v, ref[k]), k\n"
      "print('ok', len(sd))\n");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("ok "), std::string::npos) << check.output;
  // The model YAML written next to it is the one kestrel carries.
  std::ifstream in(f.dir.file("model.yaml"));
  std::stringstream yaml;
  yaml << in.rdbuf();
  EXPECT_EQ(yaml.str(), models::load_model_weights(imported).info.model_yaml);

  // A non-kestrel file is refused by name.
  test::write_file(f.dir.file("junk.safetensors"), "junk");
  const auto bad = test::run_command(python() + " tools/export_state_dict.py " + f.dir.file("junk.safetensors") + " " +
                                     f.dir.file("x.pt"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("junk.safetensors: not a"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace kestrel
