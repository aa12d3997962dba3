#include "kestrel/core/regular_file.h"

#include <filesystem>

#include "kestrel/core/error.h"

namespace kestrel {

void require_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) fail(path, ": not found");
  if (ec) fail(path, ": cannot be read (", ec.message(), ")");
  if (status.type() == fs::file_type::directory) fail(path, ": is a directory, not a file");
  if (status.type() != fs::file_type::regular) fail(path, ": not a regular file (a FIFO, socket or device)");
}

}  // namespace kestrel
