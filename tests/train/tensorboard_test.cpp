// The TensorBoard event writer: CRC-32C against published check values (RFC 3720 B.4), the bytes of
// one record against the Event that TensorBoard's own protobuf classes serialise, files read back by
// TensorBoard's EventAccumulator and its record reader (which checks every CRC), and the errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/train/tensorboard.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;

uint32_t crc_of(const std::vector<uint8_t>& bytes) { return crc32c(bytes.data(), bytes.size()); }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  return v;
}

// Splits a TFRecord file into its records, checking the framing and both masked CRCs.
std::vector<std::string> read_records(const std::string& path) {
  const std::string file = read_bytes(path);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size()) << "truncated header";
    if (at + 12 > file.size()) break;
    const uint64_t length = le(file, at, 8);
    EXPECT_EQ(le(file, at + 8, 4), masked_crc32c(file.data() + at, 8)) << "length CRC of record " << records.size();
    EXPECT_LE(at + 16 + length, file.size()) << "truncated record";
    if (at + 16 + length > file.size()) break;
    records.push_back(file.substr(at + 12, length));
    EXPECT_EQ(le(file, at + 12 + length, 4), masked_crc32c(file.data() + at + 12, length))
        << "data CRC of record " << records.size() - 1;
    at += 16 + length;
  }
  return records;
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// Runs a Python script that prints "RESULT <json>" and returns that JSON.
json python_result(const std::string& script) {
  const test::CommandResult r = test::run_python(script);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("RESULT ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no result from Python:\n" << r.output;
    return json();
  }
  return json::parse(r.output.substr(at + 7, r.output.find('\n', at) - at - 7));
}

TEST(TensorBoardCrc32c, StandardCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c("a", 1), 0xC1D04330u);
}

// RFC 3720 (iSCSI) appendix B.4; the RFC lists the CRC bytes as transmitted, least significant first.
TEST(TensorBoardCrc32c, Rfc3720Vectors) {
  std::vector<uint8_t> bytes(32, 0x00);
  EXPECT_EQ(crc_of(bytes), 0x8A9136AAu);
  bytes.assign(32, 0xFF);
  EXPECT_EQ(crc_of(bytes), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc_of(bytes), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(crc_of(bytes), 0x113FDB5Cu);
  const std::vector<uint8_t> read_pdu = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
      0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(crc_of(read_pdu), 0xD9963A56u);
}

TEST(TensorBoardCrc32c, MaskMatchesTfRecord) {
  const uint32_t crc = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardWriter, FileNameLikeSummaryWriterAndDirectoryCreated) {
  TempDir tmp;
  const std::string dir = tmp.file("runs/exp/nested");
  std::string first, second;
  {
    TensorBoardWriter a(dir);
    TensorBoardWriter b(dir);
    first = a.path();
    second = b.path();
  }
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_NE(first, second);
  EXPECT_EQ(fs::path(first).parent_path(), fs::path(dir));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::regex pattern(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+))");
  std::smatch m;
  const std::string name = fs::path(first).filename().string();
  ASSERT_TRUE(std::regex_match(name, m, pattern)) << name;
  EXPECT_NEAR(std::stod(m[1]), unix_time_now(), 60.0);
  EXPECT_EQ(m[2].str(), host);
  EXPECT_EQ(m[3].str(), std::to_string(::getpid()));
  const std::string name2 = fs::path(second).filename().string();
  std::smatch m2;
  ASSERT_TRUE(std::regex_match(name2, m2, pattern)) << name2;
  EXPECT_EQ(std::stoi(m2[4]), std::stoi(m[4]) + 1);  // the per-process counter
}

// The bytes of our records equal what TensorBoard's own protobuf classes serialise for the same
// Event, including a negative step (a 10-byte varint) and a value that float rounds.
TEST(TensorBoardWriter, RecordBytesEqualTensorBoardProtobuf) {
  TempDir tmp;
  std::string path;
  {
    TensorBoardWriter writer(tmp.path());
    path = writer.path();
    writer.add_scalar("train/box_loss", 0.1, 3, 1700000000.125);
    writer.add_scalar("x", -2.5, -7, 1.0);
    writer.add_scalar("metrics/mAP_0.5:0.95", 3.14159265358979, int64_t{1} << 40, 1712345678.987654);
  }
  const std::vector<std::string> records = read_records(path);
  ASSERT_EQ(records.size(), 4u);

  // First record by hand: wall_time (field 1, fixed64) and file_version (field 3, length-delimited).
  ASSERT_EQ(records[0].size(), 9u + 2u + 13u);
  EXPECT_EQ(records[0][0], '\x09');
  double wall_time;
  std::memcpy(&wall_time, records[0].data() + 1, 8);  // little-endian host
  EXPECT_NEAR(wall_time, unix_time_now(), 60.0);
  EXPECT_EQ(records[0].substr(9), std::string("\x1a\x0d") + "brain.Event:2");

  const json expected = python_result(R"PY(
import json
from tensorboard.compat.proto import event_pb2, summary_pb2
def scalar(tag, value, step, wall_time):
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])).SerializeToString().hex()
print('RESULT ' + json.dumps([
    scalar('train/box_loss', 0.1, 3, 1700000000.125),
    scalar('x', -2.5, -7, 1.0),
    scalar('metrics/mAP_0.5:0.95', 3.14159265358979, 1 << 40, 1712345678.987654)]))
)PY");
  ASSERT_TRUE(expected.is_array());
  ASSERT_EQ(expected.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(hex(records[i + 1]), expected[i].get<std::string>()) << "event " << i;
}

TEST(TensorBoardWriter, TensorBoardReadsScalarsBack) {
  TempDir tmp;
  struct Scalar {
    std::string tag;
    double value;
    int64_t step;
    double wall_time;
  };
  const std::vector<Scalar> written = {
      {"train/box_loss", 0.0512, 0, 1700000000.5},       {"train/box_loss", 0.0498, 1, 1700000001.25},
      {"train/box_loss", 0.04, 250, 1700000123.0625},    {"metrics/mAP_0.5", 0.125, 0, 1700000002.0},
      {"metrics/mAP_0.5", 0.6789, 1, 1700000300.984375}, {"x/lr0", 1e-8, int64_t{1} << 33, 1700000400.5}};
  std::string path;
  {
    TensorBoardWriter writer(tmp.file("run"));
    path = writer.path();
    for (const Scalar& s : written) writer.add_scalar(s.tag, s.value, s.step, s.wall_time);
    writer.add_scalar("now", 1.0, 5);  // default wall time
  }
  const json got = python_result(R"PY(
import json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
path = ")PY" + path + R"PY("
# Every record through TensorBoard's record reader, which checks both CRCs (EventAccumulator would
# stop quietly at a bad one).
reader = pywrap_tensorflow.PyRecordReader_New(path)
events = []
try:
    while True:
        reader.GetNext()
        events.append(event_pb2.Event.FromString(reader.record()))
except errors.OutOfRangeError:
    pass
acc = EventAccumulator(path)
acc.Reload()
out = {'records': len(events), 'file_version': events[0].file_version, 'first_wall_time': events[0].wall_time,
       'tags': sorted(acc.Tags()['scalars']), 'scalars': {}}
for tag in acc.Tags()['scalars']:
    out['scalars'][tag] = [[s.wall_time, s.step, s.value] for s in acc.Scalars(tag)]
print('RESULT ' + json.dumps(out))
)PY");
  ASSERT_TRUE(got.is_object());
  EXPECT_EQ(got["records"], written.size() + 2);
  EXPECT_EQ(got["file_version"], "brain.Event:2");
  EXPECT_NEAR(got["first_wall_time"].get<double>(), unix_time_now(), 60.0);
  EXPECT_EQ(got["tags"], json({"metrics/mAP_0.5", "now", "train/box_loss", "x/lr0"}));
  std::map<std::string, size_t> seen;
  for (const Scalar& s : written) {
    const json& series = got["scalars"][s.tag];
    const size_t i = seen[s.tag]++;
    ASSERT_LT(i, series.size()) << s.tag;
    EXPECT_EQ(series[i][0].get<double>(), s.wall_time) << s.tag << " " << i;
    EXPECT_EQ(series[i][1].get<int64_t>(), s.step) << s.tag << " " << i;
    EXPECT_EQ(series[i][2].get<double>(), static_cast<double>(static_cast<float>(s.value))) << s.tag << " " << i;
  }
  for (const auto& [tag, n] : seen) EXPECT_EQ(got["scalars"][tag].size(), n) << tag;
  ASSERT_EQ(got["scalars"]["now"].size(), 1u);
  EXPECT_NEAR(got["scalars"]["now"][0][0].get<double>(), unix_time_now(), 60.0);
}

// A resumed run's restart: its bytes are TensorBoard's own Event{session_log: START}, twice, and over the run
// folder TensorBoard's readers (the older EventAccumulator and the plugin_event_accumulator the server's
// Python loader uses, which ignores a run's first START) drop what the earlier file logged from that step on
// (epochs logged by a run that stopped before saving them) and keep the rest.
TEST(TensorBoardWriter, SessionStartDropsLaterStepsOfEarlierFiles) {
  TempDir tmp;
  std::string resumed_path;
  {
    TensorBoardWriter first(tmp.file("run"));
    for (int step = 0; step < 3; ++step) first.add_scalar("train/box_loss", 1.0 + step, step, 1700000000.0 + step);
  }
  {
    TensorBoardWriter resumed(tmp.file("run"));
    resumed_path = resumed.path();
    resumed.add_restart(1, 1700000100.5);
    for (int step = 1; step < 3; ++step) resumed.add_scalar("train/box_loss", 10.0 + step, step, 1700000100.0 + step);
  }
  const std::vector<std::string> records = read_records(resumed_path);
  ASSERT_EQ(records.size(), 5u);
  const json got = python_result(R"PY(
import json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util
start = event_pb2.Event(wall_time=1700000100.5, step=1, session_log=event_pb2.SessionLog(
    status=event_pb2.SessionLog.START)).SerializeToString().hex()
acc = EventAccumulator(")PY" + tmp.file("run") + R"PY(")
acc.Reload()
plugin = plugin_event_accumulator.EventAccumulator(")PY" + tmp.file("run") + R"PY(")
plugin.Reload()
print('RESULT ' + json.dumps({'start': start,
                              'scalars': [[s.step, s.value] for s in acc.Scalars('train/box_loss')],
                              'plugin': [[t.step, float(tensor_util.make_ndarray(t.tensor_proto))]
                                         for t in plugin.Tensors('train/box_loss')]}))
)PY");
  ASSERT_TRUE(got.is_object());
  EXPECT_EQ(hex(records[1]), got["start"].get<std::string>());
  EXPECT_EQ(hex(records[2]), got["start"].get<std::string>());
  EXPECT_EQ(got["scalars"], json({{0, 1.0}, {1, 11.0}, {2, 12.0}})) << "the first file's steps 1 and 2 are dropped";
  EXPECT_EQ(got["plugin"], json({{0, 1.0}, {1, 11.0}, {2, 12.0}})) << "by the server's loader too";
}

TEST(TensorBoardWriter, FlushMakesRecordsVisibleAndCloseIsFinal) {
  TempDir tmp;
  TensorBoardWriter writer(tmp.path());
  const uintmax_t header = fs::file_size(writer.path());
  EXPECT_EQ(header, 16u + 24u);  // the version record is flushed at once
  writer.add_scalar("a", 1.0, 1, 2.0);
  writer.flush();
  const uintmax_t one = fs::file_size(writer.path());
  EXPECT_GT(one, header);
  EXPECT_EQ(read_records(writer.path()).size(), 2u);
  writer.close();
  writer.close();  // harmless
  EXPECT_THROW(writer.add_scalar("a", 2.0, 2, 3.0), Error);
  EXPECT_THROW(writer.flush(), Error);
  EXPECT_EQ(fs::file_size(writer.path()), one);
}

TEST(TensorBoardWriter, UnwritableDirectoryNamesIt) {
  TempDir tmp;
  test::write_file(tmp.file("plain_file"), "not a directory");
  const std::string below_file = tmp.file("plain_file/logs");
  try {
    TensorBoardWriter writer(below_file);
    FAIL() << "no error for " << below_file;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(below_file), std::string::npos) << e.what();
  }
  try {
    TensorBoardWriter writer(tmp.file("plain_file"));
    FAIL() << "no error for a regular file as log directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.file("plain_file")), std::string::npos) << e.what();
  }
  if (::geteuid() != 0) {  // root writes into read-only folders
    const std::string read_only = tmp.file("read_only");
    fs::create_directory(read_only);
    ::chmod(read_only.c_str(), 0555);
    try {
      TensorBoardWriter writer(read_only);
      FAIL() << "no error for " << read_only;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(read_only), std::string::npos) << e.what();
    }
    ::chmod(read_only.c_str(), 0755);
  }
}

}  // namespace
}  // namespace kestrel::train
