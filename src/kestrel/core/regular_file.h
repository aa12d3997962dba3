// Files kestrel reads whole (images, labels, YAML, weights, JSON) must be regular files: opening a FIFO
// blocks until something writes to it (a hang), and a directory opens and reports an absurd size
// (std::bad_alloc). Both are refused by name before opening; so is a shell's process substitution
// (`--data <(...)`), which is a FIFO too.
#pragma once
#include <string>

namespace kestrel {

// Throws kestrel::Error "<path>: not found", "<path>: is a directory, not a file" or "<path>: not a regular
// file (a FIFO, socket or device)". Symbolic links are followed.
void require_regular_file(const std::string& path);

}  // namespace kestrel
