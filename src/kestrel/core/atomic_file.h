// Files written whole or not at all. The bytes go to a temporary file beside the target, named for the
// process and thread (ranks and loader threads may write the same target at once), which is renamed over
// the target only when every byte is written: a reader, another rank, or the next run after kestrel
// crashes sees the old file or the complete new one, never a part of one.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

enum class Durability {
  kRename,   // the rename alone: caches and images, many small files that can be made again
  kFlushed,  // also survives a power cut or a kernel crash: the bytes and then the rename are flushed to
             // the disk (fsync of the file and of its folder) before the call returns. Weights, training
             // state and run files, where a crash after the rename could otherwise leave an empty file.
};

// Writes the concatenation of `parts` to `path`. Throws kestrel::Error naming `path` ("cannot write
// (<reason>)", "write failed (<reason>)", "cannot move the new file into place (<reason>)"), with the
// temporary file removed.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts, Durability durability);

}  // namespace kestrel
