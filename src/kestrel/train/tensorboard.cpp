#include "kestrel/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "kestrel/core/error.h"

namespace kestrel::train {
namespace {

// ---- CRC-32C ------------------------------------------------------------------------------------

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// ---- protobuf wire format (the subset Event and Summary need) -----------------------------------

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }

void put_le(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

// int64 fields are varints of the two's-complement value (negative numbers take 10 bytes).
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}

// Strings, bytes and embedded messages.
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// tensorflow/core/util/event.proto and summary.proto field numbers.
namespace event {
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
namespace session_log {
constexpr uint32_t kStatus = 1;
constexpr uint64_t kStart = 1;  // SessionLog.SessionStatus.START
}
namespace summary {
constexpr uint32_t kValue = 1;
}
namespace summary_value {
constexpr uint32_t kTag = 1, kSimpleValue = 2;
}

// ---- the file -----------------------------------------------------------------------------------

// SummaryWriter flushes every 120 s (flush_secs); add_scalar does the same when it finds the last
// flush older than this.
constexpr double kFlushSeconds = 120.0;

std::atomic<int> next_writer_id{0};

std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "localhost";
  return name.data();
}

std::string event_file_name() {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(std::time(nullptr)));
  return cat("events.out.tfevents.", seconds, ".", host_name(), ".", ::getpid(), ".", next_writer_id++);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  if (log_dir.empty()) fail("TensorBoard log directory: empty path");
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec || !std::filesystem::is_directory(log_dir))
    fail("cannot create TensorBoard log directory ", log_dir, ": ",
         ec ? ec.message() : std::string("exists and is not a directory"));
  path_ = (std::filesystem::path(log_dir) / event_file_name()).string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) fail("cannot create TensorBoard event file ", path_, ": ", std::strerror(errno));

  std::string version;
  put_double(version, event::kWallTime, unix_time_now());
  put_bytes(version, event::kFileVersion, "brain.Event:2");
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    write_record(version);
    flush_locked();  // as SummaryWriter: the file is readable from the start
  } catch (const Error&) {
    std::fclose(file_);  // the destructor does not run when the constructor throws
    file_ = nullptr;
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    close();
  } catch (const Error&) {
    // A destructor must not throw; close() reports the error to callers that want it.
  }
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  std::string summary_value;
  put_bytes(summary_value, summary_value::kTag, tag);
  put_float(summary_value, summary_value::kSimpleValue, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, summary::kValue, summary_value);
  std::string event;
  put_double(event, event::kWallTime, wall_time);
  put_int64(event, event::kStep, step);
  put_bytes(event, event::kSummary, summary);

  std::lock_guard<std::mutex> lock(mutex_);
  write_record(event);
  if (unix_time_now() - last_flush_ >= kFlushSeconds) flush_locked();
}

void TensorBoardWriter::add_session_start(int64_t step, double wall_time) {
  std::string session;
  put_key(session, session_log::kStatus, kVarint);
  put_varint(session, session_log::kStart);
  std::string event;
  put_double(event, event::kWallTime, wall_time);
  put_int64(event, event::kStep, step);
  put_bytes(event, event::kSessionLog, session);

  std::lock_guard<std::mutex> lock(mutex_);
  write_record(event);
  flush_locked();
}

void TensorBoardWriter::add_restart(int64_t step, double wall_time) {
  add_session_start(step, wall_time);
  add_session_start(step, wall_time);
}

void TensorBoardWriter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
}

void TensorBoardWriter::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_) return;
  std::FILE* file = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(file) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!flushed || !closed)
    fail("cannot write TensorBoard event file ", path_, ": ", std::strerror(flushed ? errno : flush_errno));
}

// TFRecord framing: uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of
// the data; all little-endian. One fwrite per record, so a reader never sees half a header from us.
void TensorBoardWriter::write_record(const std::string& data) {
  if (!file_) fail("TensorBoard event file ", path_, " is already closed");
  std::string record;
  record.reserve(data.size() + 16);
  put_le(record, data.size(), 8);
  put_le(record, masked_crc32c(record.data(), 8), 4);
  record += data;
  put_le(record, masked_crc32c(data.data(), data.size()), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    fail("cannot write TensorBoard event file ", path_, ": ", std::strerror(errno));
}

void TensorBoardWriter::flush_locked() {
  if (!file_) fail("TensorBoard event file ", path_, " is already closed");
  if (std::fflush(file_) != 0) fail("cannot write TensorBoard event file ", path_, ": ", std::strerror(errno));
  last_flush_ = unix_time_now();
}

}  // namespace kestrel::train
