// safetensors: round trips, interop with the reference Python implementation (the `safetensors`
// package), and corrupt files that must be reported, not trusted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::string error_of_loading(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// dir/name: an 8-byte little-endian header length, the header JSON, then data_bytes zero bytes.
std::string file_with_header(const test::TempDir& dir, const std::string& name, const std::string& json, size_t data_bytes) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  test::write_file(dir.file(name), len + json + std::string(data_bytes, '\0'));
  return dir.file(name);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Safetensors, RoundTripAllDtypes) {
  test::TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"f32", at::randn({3, 4})},
      {"f16", at::randn({5}).to(at::kHalf)},
      {"bf16", at::randn({2, 2}).to(at::kBFloat16)},
      {"i64_scalar", at::tensor(7, at::kLong).reshape({})},
      {"u8", at::arange(10, at::kByte)},
      {"non_contiguous", at::randn({4, 6}).t()},
      {"empty", at::zeros({0, 3})},
  };
  save_safetensors(dir.file("w.safetensors"), tensors, {{"model", "yolov5n"}});
  auto loaded = load_safetensors(dir.file("w.safetensors"));
  EXPECT_EQ(loaded.metadata.at("model"), "yolov5n");
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(loaded.tensors[i].first, tensors[i].first);
    EXPECT_EQ(loaded.tensors[i].second.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_EQ(loaded.tensors[i].second.sizes(), tensors[i].second.sizes());
    EXPECT_TRUE(at::equal(loaded.tensors[i].second, tensors[i].second)) << tensors[i].first;
  }
  // no temporary file is left behind by the atomic write
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, ModelWeightsRoundTripGiveIdenticalOutputs) {
  test::TempDir dir;
  auto cfg = models::load_model_config(models::resolve_model_config_path("yolov5n"));
  at::manual_seed(3);
  auto a = models::build_model(cfg);
  at::manual_seed(4);
  auto b = models::build_model(cfg);
  save_safetensors(dir.file("a.safetensors"), models::state_dict(*a));
  auto report = models::load_state_dict(*b, load_safetensors(dir.file("a.safetensors")).tensors, true, "a.safetensors");
  EXPECT_EQ(report.loaded, 349u);
  a->eval();
  b->eval();
  at::Tensor x = at::rand({1, 3, 64, 64});
  EXPECT_TRUE(at::equal(a->predict(x), b->predict(x)));
}

TEST(Safetensors, PartialLoadReportsMismatchesAndStrictLoadFails) {
  auto cfg = models::load_model_config(models::resolve_model_config_path("yolov5n"));
  auto src = models::state_dict(*models::build_model(cfg, 80));
  auto dst = models::build_model(cfg, 3);  // different class count: the three output convs differ
  src.emplace_back("model.99.extra", at::zeros({1}));
  auto report = models::load_state_dict(*dst, src, false, "w.safetensors");
  EXPECT_EQ(report.mismatched.size(), 6u);  // m.{0,1,2}.{weight,bias}
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"model.99.extra"});
  EXPECT_TRUE(report.missing.empty());
  EXPECT_EQ(report.loaded, 349u - 6u);
  try {
    models::load_state_dict(*dst, src, true, "w.safetensors");
    FAIL() << "strict load accepted mismatching weights";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("w.safetensors: weights do not match the model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.24.m.0.weight: file [255, 64, 1, 1] vs model [24, 64, 1, 1]"), std::string::npos) << msg;
  }
}

// The reference implementation reads kestrel's file and writes one kestrel reads.
TEST(Safetensors, InteroperatesWithPythonSafetensors) {
  test::TempDir dir;
  const std::string ours = dir.file("ours.safetensors"), theirs = dir.file("theirs.safetensors");
  save_safetensors(ours, {{"a", at::arange(6, at::kFloat).reshape({2, 3})}, {"b", at::tensor({1, -2}, at::kLong)}},
                   {{"note", "hi"}});
  auto result = test::run_python(
      "import numpy as np\n"
      "from safetensors.numpy import load_file, save_file\n"
      "from safetensors import safe_open\n"
      "t = load_file('" + ours + "')\n"
      "assert t['a'].dtype == np.float32 and t['a'].tolist() == [[0, 1, 2], [3, 4, 5]], t\n"
      "assert t['b'].dtype == np.int64 and t['b'].tolist() == [1, -2], t\n"
      "with safe_open('" + ours + "', 'np') as f: assert f.metadata() == {'note': 'hi'}\n"
      "save_file({'x': np.array([[1.5, 2.5]], dtype=np.float16), 'y': np.arange(3, dtype=np.int32)}, '" + theirs + "',"
      " metadata={'from': 'python'})\n"
      "print('ok')\n");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  auto loaded = load_safetensors(theirs);
  EXPECT_EQ(loaded.metadata.at("from"), "python");
  ASSERT_EQ(loaded.tensors.size(), 2u);
  std::map<std::string, at::Tensor> by_name(loaded.tensors.begin(), loaded.tensors.end());
  ASSERT_EQ(by_name.count("x"), 1u);
  ASSERT_EQ(by_name.count("y"), 1u);
  EXPECT_EQ(by_name["x"].scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal(by_name["x"], at::tensor({1.5, 2.5}).to(at::kHalf).reshape({1, 2})));
  EXPECT_TRUE(at::equal(by_name["y"], at::arange(3, at::kInt)));
}

TEST(SafetensorsErrors, CorruptFilesAreReportedWithTheFileName) {
  test::TempDir dir;
  const std::string good = dir.file("good.safetensors");
  save_safetensors(good, {{"w", at::ones({4, 4})}});
  const std::string bytes = read_all(good);

  auto write = [&](const std::string& name, const std::string& content) {
    test::write_file(dir.file(name), content);
    return dir.file(name);
  };
  EXPECT_NE(error_of_loading(dir.file("missing.safetensors")).find("missing.safetensors: weights file not found"), std::string::npos);
  // An upstream name (train.py would download yolov5s.pt) says how to get kestrel weights.
  EXPECT_NE(error_of_loading(dir.file("yolov5s.pt")).find("yolov5s.pt: weights file not found (kestrel downloads nothing"),
            std::string::npos);
  EXPECT_NE(error_of_loading(dir.file("yolov5s.pt")).find("tools/import_pt.py"), std::string::npos);
  EXPECT_NE(error_of_loading(write("empty.safetensors", "")).find("empty.safetensors: not a safetensors file"), std::string::npos);
  EXPECT_NE(error_of_loading(write("pickle.pt", std::string("PK\x03\x04", 4) + std::string(100, 'x')))
                .find("pickle.pt: a PyTorch checkpoint (.pt, a zip archive), not safetensors"), std::string::npos);
  // After an upstream habit (--weights runs/train/exp/weights/best.pt): the run's own file is named.
  save_safetensors(dir.file("best.safetensors"), {{"w", at::ones({1})}});
  EXPECT_EQ(error_of_loading(dir.file("best.pt")),
            dir.file("best.pt") + ": weights file not found; kestrel writes weights as .safetensors: " + dir.file("best.safetensors"));
  // truncated data: the header promises 64 bytes of tensor data
  EXPECT_NE(error_of_loading(write("short.safetensors", bytes.substr(0, bytes.size() - 10))).find("lies outside the file"),
            std::string::npos);
  // garbage JSON of the right length
  std::string garbage = bytes;
  for (size_t i = 8; i < 20; ++i) garbage[i] = '#';
  EXPECT_NE(error_of_loading(write("garbage.safetensors", garbage)).find("corrupt safetensors header"), std::string::npos);

  auto with_header = [&](const std::string& name, const std::string& json, size_t data_bytes) {
    return file_with_header(dir, name, json, data_bytes);
  };
  EXPECT_NE(error_of_loading(with_header("dtype.safetensors", R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", 4))
                .find("unsupported dtype 'F7'"),
            std::string::npos);
  EXPECT_NE(error_of_loading(with_header("size.safetensors", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4))
                .find("has 4 bytes but its shape and dtype need 8"),
            std::string::npos);
  EXPECT_NE(error_of_loading(with_header("overlap.safetensors",
                                         R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(error_of_loading(with_header("noshape.safetensors", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4))
                .find("corrupt safetensors header"),
            std::string::npos);
  EXPECT_NE(error_of_loading(with_header("neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4))
                .find("negative dimension"),
            std::string::npos);
}

// Found by fuzz/safetensors_fuzz: a shape whose byte count overflows 64 bits wrapped to 0 bytes, matched
// empty offsets and reached at::empty, which threw c10::Error (no file name, not a kestrel::Error);
// numbers out of range (1e300) were cast with undefined behaviour, fractional ones (1.5) truncated.
TEST(SafetensorsErrors, LyingShapesAndNonIntegerNumbersAreReported) {
  test::TempDir dir;
  EXPECT_EQ(error_of_loading(""), "a weights file is needed, but the path given is empty ('')");  // --weights ''
  auto with_header = [&](const std::string& name, const std::string& json, size_t data_bytes) {
    return file_with_header(dir, name, json, data_bytes);
  };
  const std::string overflow = with_header("overflow.safetensors",
      R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0);
  EXPECT_NE(error_of_loading(overflow).find(overflow + ": tensor 'w' has an impossibly large shape"), std::string::npos)
      << error_of_loading(overflow);
  const std::string overflow_zero = with_header("overflow_zero.safetensors",
      R"({"w":{"dtype":"F32","shape":[4611686018427387904,4,0],"data_offsets":[0,0]}})", 0);
  EXPECT_NE(error_of_loading(overflow_zero).find("impossibly large shape"), std::string::npos);
  const std::string huge_dim = with_header("huge_dim.safetensors", R"({"w":{"dtype":"F32","shape":[1e300],"data_offsets":[0,4]}})", 4);
  EXPECT_NE(error_of_loading(huge_dim).find(huge_dim + ": tensor 'w': shape dimensions must be whole numbers"), std::string::npos)
      << error_of_loading(huge_dim);
  const std::string half_dim = with_header("half_dim.safetensors", R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4);
  EXPECT_NE(error_of_loading(half_dim).find("shape dimensions must be whole numbers"), std::string::npos);
  const std::string huge_offset = with_header("huge_offset.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,1e30]}})", 4);
  EXPECT_NE(error_of_loading(huge_offset).find(huge_offset + ": tensor 'w': data_offsets must be whole numbers"), std::string::npos)
      << error_of_loading(huge_offset);
  const std::string shape_number = with_header("shape_number.safetensors", R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8);
  EXPECT_NE(error_of_loading(shape_number).find("shape must be a list"), std::string::npos);
  const std::string metadata_list = with_header("metadata_list.safetensors", R"({"__metadata__":["x"]})", 0);
  EXPECT_NE(error_of_loading(metadata_list).find(metadata_list + ": corrupt safetensors header: __metadata__ is not a JSON object"),
            std::string::npos);
  // a value nested 100,000 deep: named by its kind (printing it recursed once per level, past the stack)
  const std::string deep = with_header("deep.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[)" +
                                       std::string(100000, '[') + std::string(100000, ']') + ",4]}}", 4);
  EXPECT_EQ(error_of_loading(deep), deep + ": tensor 'w': data_offsets must be whole numbers from 0 to 2^63-1, not a nested list");
  // empty, but strides of 2^62 x 2^62 elements: ATen's stride calculation would overflow
  const std::string empty_overflow = with_header("empty_overflow.safetensors",
      R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})", 0);
  EXPECT_NE(error_of_loading(empty_overflow).find(empty_overflow + ": tensor 'w' has an impossibly large shape"), std::string::npos)
      << error_of_loading(empty_overflow);
  // ATen's 64 dimensions at most (a shape of 100,000 ones kept its checks busy for minutes)
  std::string ones = "1";
  for (int i = 1; i < 65; ++i) ones += ",1";
  const std::string many_dims = with_header("many_dims.safetensors", R"({"w":{"dtype":"F32","shape":[)" + ones + R"(],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(error_of_loading(many_dims), many_dims + ": tensor 'w' has 65 dimensions; at most 64");
  // zero-element tensors (a zero dimension anywhere) are still fine
  const std::string empty = with_header("empty.safetensors", R"({"w":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}})", 0);
  EXPECT_EQ(load_safetensors(empty).tensors.at(0).second.sizes(), (std::vector<int64_t>{0, 3}));
}

// Found reviewing the reader for the fuzz harness: an empty tensor at the offset where the next tensor
// starts (as writers lay them out) was reported as an overlap when the JSON listed the other one first.
TEST(SafetensorsErrors, EmptyTensorWhereTheNextStartsIsNoOverlap) {
  test::TempDir dir;
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  test::write_file(dir.file("w.safetensors"), len + json + std::string(8, '\0'));
  const SafetensorsContents c = load_safetensors(dir.file("w.safetensors"));
  ASSERT_EQ(c.tensors.size(), 2u);
  EXPECT_EQ(c.tensors[0].first, "b");  // file order: by offset, the empty one first
  EXPECT_EQ(c.tensors[1].second.numel(), 2);
}

// The format's rules the Rust library enforces: no tensor named twice (nlohmann kept the last one silently),
// and data bytes no tensor owns (a hole, or trailing bytes) are a damaged file.
TEST(SafetensorsErrors, RepeatedNamesAndHolesAreRefused) {
  test::TempDir dir;
  auto with_header = [&](const std::string& name, const std::string& json, size_t data_bytes) {
    return file_with_header(dir, name, json, data_bytes);
  };
  const std::string twice = with_header("twice.safetensors",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  EXPECT_EQ(error_of_loading(twice), twice + ": corrupt safetensors header: 'w' is given twice");
  // among many entries (nlohmann's parser callback, which found repeats before, made such headers quadratic)
  std::string entries;
  for (int i = 0; i < 50000; ++i) entries += "\"t" + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)";
  const std::string many = with_header("many.safetensors", "{" + entries + R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(load_safetensors(many).tensors.size(), 50001u);
  const std::string many_twice = with_header("many_twice.safetensors", "{" + entries + R"("t7":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 0);
  EXPECT_EQ(error_of_loading(many_twice), many_twice + ": corrupt safetensors header: 't7' is given twice");
  // a key repeated inside an entry is not a tensor named twice
  const std::string inner = with_header("inner.safetensors", R"({"w":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(load_safetensors(inner).tensors.size(), 1u);
  const std::string hole = with_header("hole.safetensors",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12);
  EXPECT_EQ(error_of_loading(hole), hole + ": corrupt safetensors file: bytes 4..8 of the data belong to no tensor");
  const std::string tail = with_header("tail.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6);
  EXPECT_EQ(error_of_loading(tail), tail + ": corrupt safetensors file: bytes 4..6 of the data belong to no tensor");
  const std::string late = with_header("late.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 6);
  EXPECT_EQ(error_of_loading(late), late + ": corrupt safetensors file: bytes 0..2 of the data belong to no tensor");
}

// Metadata that is not UTF-8 (a path in a folder named in Latin-1): saved with U+FFFD in its place, not a
// failed save (nlohmann's dump throws on such bytes).
TEST(Safetensors, MetadataThatIsNotUtf8IsSavedWithReplacementCharacters) {
  test::TempDir dir;
  save_safetensors(dir.file("m.safetensors"), {{"w", at::ones({1})}}, {{"path", "/data/caf\xe9/x"}});
  EXPECT_EQ(load_safetensors(dir.file("m.safetensors")).metadata.at("path"), "/data/caf\xef\xbf\xbd/x");
}

// Found in the second fuzzing campaign (fuzz/README.md): a BOOL tensor's bytes were taken as they
// came. A byte other than 0 or 1 is not a bool (undefined behaviour where ATen reads it): refused.
TEST(SafetensorsErrors, BoolBytesOtherThanZeroAndOneAreRefused) {
  test::TempDir dir;
  auto bool_file = [&](const std::string& name, const std::string& bytes) {
    const std::string json = R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    test::write_file(dir.file(name), len + json + bytes);
    return dir.file(name);
  };
  const SafetensorsContents ok = load_safetensors(bool_file("ok.safetensors", std::string("\x01\x00\x01", 3)));
  EXPECT_EQ(ok.tensors.at(0).second.sum().item<int64_t>(), 2);
  const std::string bad = bool_file("bad.safetensors", std::string("\x01\x00\x02", 3));
  EXPECT_NE(error_of_loading(bad).find(bad + ": tensor 'm' (BOOL) holds the byte 2 at element 2"), std::string::npos)
      << error_of_loading(bad);
}

}  // namespace
}  // namespace kestrel
