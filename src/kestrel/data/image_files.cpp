#include "kestrel/data/image_files.h"

#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"

namespace kestrel::data {
namespace fs = std::filesystem;

constexpr const char* kImageExtensions[] = {".bmp", ".dng", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff", ".webp", ".pfm"};

bool has_image_extension(const std::string& path) {
  const std::string ext = ascii_lower(fs::path(path).extension().string());
  for (const char* known : kImageExtensions)
    if (ext == known) return true;
  return false;
}

std::string image_formats_text() {
  std::string text = "images:";
  for (const char* ext : kImageExtensions) text += cat(" ", ext + 1);
  return text;
}

namespace {

bool is_pattern(const std::string& entry) { return entry.find_first_of("*?[") != std::string::npos; }

// Every entry below `root` that is not a folder, following folder links; a folder met again (a link loop) is not entered twice.
// Hidden files and folders (names starting with '.', such as macOS's ._x.jpg) are left out unless
// `with_hidden` (a glob pattern decides for itself), as Python's glob leaves them out of upstream's listings.
// A folder that cannot be listed is an error naming `source`: files must not go missing in silence.
void walk(const std::string& root, const std::string& source, const std::function<void(const fs::path&)>& file,
          bool with_hidden = false) {
  std::set<std::pair<dev_t, ino_t>> visited;
  const auto first_visit = [&](const fs::path& dir) {
    struct stat st {};
    return ::stat(dir.c_str(), &st) != 0 || visited.insert({st.st_dev, st.st_ino}).second;
  };
  first_visit(root);
  std::error_code ec;
  const fs::recursive_directory_iterator end;
  fs::path listing = root;  // the folder the next step reads: the one entered, or the current one's
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink, ec);; it.increment(ec)) {
    if (ec) fail(source, ": cannot list ", listing.string(), " (", ec.message(), ")");
    if (it == end) break;
    const std::string name = it->path().filename().string();
    listing = it->path().parent_path();
    if (!with_hidden && !name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      ec.clear();
      continue;
    }
    if (it->is_directory(ec)) {
      if (!first_visit(it->path())) it.disable_recursion_pending();
      else listing = it->path();  // entered next
    } else {
      // Files, and what only looks like one (a dangling link, a FIFO): passed on, so that reading it reports
      // it by name rather than the listing dropping it in silence.
      file(it->path());
    }
    ec.clear();
  }
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t slash; (slash = path.find('/', start)) != std::string::npos; start = slash + 1) parts.push_back(path.substr(start, slash - start));
  parts.push_back(path.substr(start));
  return parts;
}

// Python's glob: `*`, `?` and `[...]` within one name, not matching a leading '.'; `**` any number of
// folders (none included), hidden ones excepted.
bool match_parts(const std::vector<std::string>& pattern, size_t p, const std::vector<std::string>& path, size_t s) {
  if (p == pattern.size()) return s == path.size();
  if (pattern[p] == "**") {
    for (size_t k = s; k <= path.size(); ++k) {
      if (k > s && !path[k - 1].empty() && path[k - 1][0] == '.') break;
      if (match_parts(pattern, p + 1, path, k)) return true;
    }
    return false;
  }
  return s < path.size() && ::fnmatch(pattern[p].c_str(), path[s].c_str(), FNM_PERIOD) == 0 &&
         match_parts(pattern, p + 1, path, s + 1);
}

// The files a glob pattern names, sorted; a pattern matching none is an error.
std::vector<std::string> expand_pattern(const std::string& pattern, const std::string& source) {
  std::vector<std::string> out;
  if (pattern.find("**") == std::string::npos) {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) fail(source, ": cannot expand ", pattern);
  } else {
    // The walk starts at the folder before the first wildcard.
    const size_t wild = pattern.find_first_of("*?[");
    const size_t slash = pattern.rfind('/', wild);
    const std::string root = slash == std::string::npos ? "." : pattern.substr(0, slash == 0 ? 1 : slash);
    const std::vector<std::string> wanted = split_path(pattern);
    walk(root, source, [&](const fs::path& file) {
      std::string path = file.string();
      if (slash == std::string::npos && path.rfind("./", 0) == 0) path.erase(0, 2);
      if (match_parts(wanted, 0, split_path(path), 0)) out.push_back(path);
    }, /*with_hidden=*/true);
  }
  if (out.empty()) fail(source, ": no file matches ", pattern);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> list_images(const std::vector<std::string>& entries, const std::string& source) {
  return list_files(entries, source, has_image_extension);
}

std::vector<std::string> list_files(const std::vector<std::string>& entries, const std::string& source,
                                    const std::function<bool(const std::string&)>& wanted, const std::string& supported) {
  std::vector<std::string> images;
  for (const auto& entry : entries) {
    std::error_code ec;
    if (!fs::exists(entry, ec) && is_pattern(entry)) {
      for (const std::string& match : expand_pattern(entry, source))
        if (!fs::is_directory(match, ec) && wanted(match)) images.push_back(match);  // what is not a file is reported
    } else if (fs::is_directory(entry, ec)) {
      walk(entry, source, [&](const fs::path& file) {
        if (wanted(file.string())) images.push_back(file.string());
      });
    } else if (fs::is_regular_file(entry, ec) && ascii_lower(fs::path(entry).extension().string()) == ".txt") {
      std::ifstream in(entry);
      // Upstream's open() raises: an unreadable list (permissions) is an error, not a split without its images.
      if (!in) fail(source, ": cannot read the list ", entry, " (", std::strerror(errno), ")");
      const fs::path parent = fs::path(entry).parent_path();
      std::string line;
      int number = 0;
      while (std::getline(in, line)) {
        ++number;
        while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();  // \r, tabs
        if (line.empty()) continue;
        // Upstream turns a leading "./" into the list's folder and leaves other relative lines relative to the
        // working folder; kestrel takes those relative to the list where they do not exist from here.
        fs::path p(line);
        if (line.rfind("./", 0) == 0) p = parent / line.substr(2);
        else if (!p.is_absolute() && !fs::exists(p, ec)) p = parent / p;
        if (fs::is_directory(p, ec)) {  // a folder in the list: its files, as a folder source (detect.py's lists)
          walk(p.string(), source, [&](const fs::path& file) {
            if (wanted(file.string())) images.push_back(file.string());
          });
        } else if (wanted(p.string())) {
          images.push_back(p.lexically_normal().string());  // a missing one is reported where it is read
        } else if (!fs::exists(p, ec)) {  // a folder or file of another name that is not there: said, not lost
          std::cerr << "WARNING: " << source << ": " << entry << ":" << number << ": " << line << " does not exist (skipped)\n";
        }
      }
      if (in.bad()) fail(source, ": reading the list ", entry, " failed part way (", std::strerror(errno), ")");
    } else if (fs::is_regular_file(entry, ec) && wanted(entry)) {
      images.push_back(entry);
    } else if (fs::exists(entry, ec) && !fs::is_directory(entry, ec)) {  // a file of another kind
      if (!fs::is_regular_file(entry, ec) && wanted(entry))  // its name is right: what it is, is not
        fail(source, ": ", entry, " is not a regular file (a FIFO, socket or device)");
      const std::string ext = fs::path(entry).extension().string();
      fail(source, ": ", entry, " is not a file of a supported format (", ext.empty() ? "no extension" : ext,
           "; supported ", supported, "; or a folder or .txt list of them)");
    } else {
      fail(source, ": ", entry, " does not exist (expected a folder of images, a .txt list or an image)");
    }
  }
  std::sort(images.begin(), images.end());
  images.erase(std::unique(images.begin(), images.end()), images.end());
  return images;
}

std::string label_path_for(const std::string& image_path) {
  const std::string images = "/images/", labels = "/labels/";
  std::string path = image_path;
  const auto pos = path.rfind(images);
  if (pos != std::string::npos) path.replace(pos, images.size(), labels);
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) path.erase(dot);
  return path + ".txt";
}

}  // namespace kestrel::data
