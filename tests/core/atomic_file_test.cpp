// Files written whole or not at all (core/atomic_file): what a reader can see while writers replace a file,
// and what is left behind when the write fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "kestrel/core/atomic_file.h"
#include "test_support.h"

namespace kestrel {
namespace {
namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST(AtomicFile, WritesThePartsInOrderAndReplacesTheOldFile) {
  test::TempDir dir;
  const std::string path = dir.file("out.bin");
  test::write_file(path, "an older, longer content");
  const char bytes[3] = {'\0', '\xff', 'z'};
  for (Durability d : {Durability::kRename, Durability::kFlushed}) {
    write_file_atomic(path, {"head:", {bytes, 3}, "", "tail"}, d);
    EXPECT_EQ(read_all(path), std::string("head:") + std::string(bytes, 3) + "tail");
    EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"out.bin"});  // no temporary file left
  }
}

// A name near the file-name limit (255 bytes): the temporary file's longer name would not fit, so a short one
// is used (225+ byte names of detect's sources failed with "File name too long").
TEST(AtomicFile, NamesNearTheLimitAreWritten) {
  test::TempDir dir;
  const std::string name = dir.file(std::string(250, 'n') + ".jpg");
  write_file_atomic(name, {"whole"}, Durability::kFlushed);
  EXPECT_EQ(read_all(name), "whole");
  write_file_atomic(name, {"again"}, Durability::kFlushed);
  EXPECT_EQ(read_all(name), "again");
  EXPECT_EQ(folder_entries(dir.path()).size(), 1u);  // no temporary file left
}

TEST(AtomicFile, FailuresNameTheFileAndLeaveNothingBehind) {
  test::TempDir dir;
  // No such folder: the temporary file cannot be created.
  const std::string missing = dir.file("no/such/folder/w.safetensors");
  EXPECT_NE(test::error_message([&] { write_file_atomic(missing, {"x"}, Durability::kFlushed); })
                .find(missing + ": cannot write (No such file or directory)"),
            std::string::npos);
  // The target is a folder with something in it: refused; the folder and its file stay as they were.
  fs::create_directories(dir.file("taken"));
  test::write_file(dir.file("taken/keep.txt"), "kept");
  std::string message = test::error_message([&] { write_file_atomic(dir.file("taken"), {"x"}, Durability::kFlushed); });
  EXPECT_NE(message.find(dir.file("taken") + ": exists and is not a regular file (a directory); not replaced"), std::string::npos)
      << message;
  EXPECT_EQ(read_all(dir.file("taken/keep.txt")), "kept");
  // A FIFO (or a device such as /dev/full): the rename would have swapped it for a regular file.
  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0600), 0);
  message = test::error_message([&] { write_file_atomic(dir.file("pipe"), {"x"}, Durability::kFlushed); });
  EXPECT_NE(message.find(dir.file("pipe") + ": exists and is not a regular file (a device, FIFO or socket); not replaced"),
            std::string::npos) << message;
  EXPECT_TRUE(fs::is_fifo(dir.file("pipe")));
  std::vector<std::string> left = folder_entries(dir.path());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"pipe", "taken"}));  // no temporary file
}

// Four writers replace one file 50 times each with a file of a single repeated byte (their own, 256 KiB)
// while a reader opens it again and again: every read must be one writer's whole file, never a mixture
// or a part. (A plain truncate-and-write shows short and mixed files here at once.)
TEST(AtomicFile, ReadersSeeAWholeFileWhileWritersReplaceIt) {
  test::TempDir dir;
  const std::string path = dir.file("shared.bin");
  constexpr size_t kSize = 256 * 1024;
  write_file_atomic(path, {std::string(kSize, 'a')}, Durability::kRename);
  std::atomic<bool> done{false}, reading{false};
  std::atomic<int> reads{0}, torn{0};
  std::thread reader([&] {
    for (bool first = true; first || !done; first = false) {
      const std::string content = read_all(path);
      ++reads;
      if (content.size() != kSize || content.find_first_not_of(content.front()) != std::string::npos) ++torn;
      reading = true;
    }
  });
  while (!reading) std::this_thread::yield();  // the writers start once the reader runs
  std::vector<std::thread> writers;
  for (char c : {'b', 'c', 'd', 'e'})
    writers.emplace_back([&, c] {
      const std::string content(kSize, c);
      for (int i = 0; i < 50; ++i) write_file_atomic(path, {content}, Durability::kRename);
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"shared.bin"});
}

}  // namespace
}  // namespace kestrel
