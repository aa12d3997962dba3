// Whether a path lies in a folder, by their components (the caller normalises both as it needs: lexically,
// or through links).
#pragma once
#include <filesystem>

namespace kestrel {

// `path` is `folder` or lies below it: folder's components (a trailing empty one, from "dir/", ignored) are
// the first of path's.
inline bool path_is_below(const std::filesystem::path& path, const std::filesystem::path& folder) {
  auto a = folder.begin(), b = path.begin();
  for (; a != folder.end() && !a->empty(); ++a, ++b)
    if (b == path.end() || *a != *b) return false;
  return true;
}

}  // namespace kestrel
