#include "kestrel/data/image_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kestrel/core/error.h"

namespace kestrel::data {
namespace fs = std::filesystem;

bool has_image_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* known : {".bmp", ".dng", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff", ".webp", ".pfm"})
    if (ext == known) return true;
  return false;
}

std::vector<std::string> list_images(const std::vector<std::string>& entries, const std::string& source) {
  std::vector<std::string> images;
  for (const auto& entry : entries) {
    std::error_code ec;
    if (fs::is_directory(entry, ec)) {
      for (auto it = fs::recursive_directory_iterator(entry, fs::directory_options::follow_directory_symlink, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) fail(source, ": cannot list ", entry, " (", ec.message(), ")");
        if (it->is_regular_file(ec) && has_image_extension(it->path().string())) images.push_back(it->path().string());
      }
    } else if (fs::is_regular_file(entry, ec) && fs::path(entry).extension() == ".txt") {
      std::ifstream in(entry);
      const fs::path parent = fs::path(entry).parent_path();
      std::string line;
      while (std::getline(in, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (line.empty()) continue;
        fs::path p(line);
        if (!p.is_absolute()) p = parent / p;
        if (has_image_extension(p.string())) images.push_back(p.lexically_normal().string());
      }
    } else if (fs::is_regular_file(entry, ec) && has_image_extension(entry)) {
      images.push_back(entry);
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
