// TensorBoard event files without TensorFlow or a protobuf library: the TFRecord framing and the
// few Event/Summary fields that scalars need, encoded by hand. The files are what PyTorch's
// SummaryWriter writes (same name pattern, same first "brain.Event:2" record), so `tensorboard
// --logdir` and its readers open them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace kestrel::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), software and table-driven; the checksum of
// TFRecord framing. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n);

// TFRecord's masked checksum: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

// Seconds since the Unix epoch, with sub-second resolution (Python's time.time()).
double unix_time_now();

// Writes one event file into `log_dir` (created with its parents if missing), named
// events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.<counter> like SummaryWriter's; the
// counter numbers the writers of this process from 0. Records go to a stdio buffer: flush() makes them
// visible to a TensorBoard that is watching. Every I/O error throws kestrel::Error naming the file.
// The methods may be called from several threads.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& log_dir);
  ~TensorBoardWriter();  // flushes and closes; errors at this point are ignored (call close() to see them)
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event{wall_time, step, summary{value{tag, simple_value}}}. The value is stored as a float,
  // as TensorBoard's simple_value is.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time = unix_time_now());
  // One Event{wall_time, step, session_log{status: START}}: TensorBoard's readers then drop the events of
  // this run (this file and earlier ones in the folder) at steps >= step that were written before it, as
  // for a restarted job.
  void add_session_start(int64_t step, double wall_time = unix_time_now());
  // A resumed run's restart at `step`: two session starts. TensorBoard's Python loader
  // (plugin_event_accumulator: `--load_fast=false`, and where the Rust data server is not available) takes
  // a run's first START as its beginning and purges only on later ones; its Rust loader and the older
  // EventAccumulator purge on every one. Two make all three drop the stale steps, also in runs whose first
  // file (an earlier kestrel's, or any fresh run's) holds no START.
  void add_restart(int64_t step, double wall_time = unix_time_now());
  void flush();
  // Flushes and closes the file; later calls to add_scalar/flush throw. Closing twice is harmless.
  void close();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);  // caller holds mutex_
  void flush_locked();

  std::string path_;
  std::FILE* file_ = nullptr;
  double last_flush_ = 0;  // unix time of the last flush
  std::mutex mutex_;
};

}  // namespace kestrel::train
