#include "detect_outputs.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <set>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"

namespace kestrel::app {

namespace fs = std::filesystem;

std::string annotated_name(const fs::path& source) {
  const std::string ext = ascii_lower(source.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" ? source.filename().string() : source.stem().string() + ".jpg";
}

void write_annotated(const fs::path& path, const cv::Mat& image) {
  if (ascii_lower(path.extension().string()) == ".png") data::write_png(path.string(), image);
  else data::write_jpeg(path.string(), image, 95);
}

std::string shown_path(const std::string& path, const std::string& source) {
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    const fs::path relative =
        fs::absolute(path, ec).lexically_normal().lexically_relative(fs::absolute(source, ec).lexically_normal());
    const fs::path root = fs::weakly_canonical(source, ec);
    if (!ec && !relative.empty() && *relative.begin() != "..") return (root / relative).string();
  }
  const fs::path resolved = fs::weakly_canonical(path, ec);
  return ec ? path : resolved.string();
}

std::vector<OutputNames> output_names(const std::vector<std::string>& images, const std::string& source) {
  const bool folder = fs::is_directory(source);
  std::vector<OutputNames> wanted;
  for (const std::string& image : images) {
    fs::path dir;
    if (folder) {
      const fs::path relative = fs::absolute(image).lexically_normal().lexically_relative(fs::absolute(source).lexically_normal());
      if (!relative.empty() && *relative.begin() != "..") dir = relative.parent_path();
    }
    wanted.push_back({dir / annotated_name(image), dir / (fs::path(image).stem().string() + ".txt")});
  }
  std::set<std::string> own_annotated, own_labels;  // names some image wants as its own
  for (const OutputNames& w : wanted) own_annotated.insert(w.annotated.string()), own_labels.insert(w.labels.string());
  std::set<std::string> taken_annotated, taken_labels;
  const auto claim = [](const fs::path& want, const std::set<std::string>& own, std::set<std::string>& taken) {
    if (taken.insert(want.string()).second) return want;
    const fs::path dir = want.parent_path();
    const std::string stem = want.stem().string(), ext = want.extension().string();
    for (int64_t n = 2;; ++n) {
      const fs::path candidate = dir / cat(stem, n, ext);
      if (!own.count(candidate.string()) && taken.insert(candidate.string()).second) return candidate;
    }
  };
  std::vector<size_t> order(images.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t i) { return wanted[i].annotated.filename() == fs::path(images[i]).filename(); });
  std::vector<OutputNames> names(images.size());
  for (const size_t i : order)
    names[i] = {claim(wanted[i].annotated, own_annotated, taken_annotated), claim(wanted[i].labels, own_labels, taken_labels)};
  return names;
}

std::vector<std::string> video_stems(const std::vector<std::string>& videos, const std::vector<OutputNames>& images,
                                     bool save_txt) {
  const auto frame_file_of = [](const std::string& stem, const fs::path& label) {
    const std::string name = label.stem().string();
    return label.parent_path().empty() && name.size() > stem.size() + 1 && name.compare(0, stem.size() + 1, stem + "_") == 0 &&
           name.find_first_not_of("0123456789", stem.size() + 1) == std::string::npos;
  };
  std::set<std::string> taken;
  std::vector<std::string> stems;
  for (const std::string& video : videos) {
    std::string stem = fs::path(video).stem().string();
    if (stem.empty() || stem.find(':') != std::string::npos) stem = "stream";
    for (int64_t n = 1;; ++n) {
      const std::string candidate = n == 1 ? stem : cat(stem, n);
      const bool clashes = save_txt && std::any_of(images.begin(), images.end(), [&](const OutputNames& image) {
                             return frame_file_of(candidate, image.labels);
                           });
      if (!clashes && taken.insert(candidate).second) {
        stems.push_back(candidate);
        break;
      }
    }
  }
  return stems;
}

fs::path free_crop_path(const fs::path& dir, const std::string& stem) {
  static std::map<std::string, int64_t> next_number;  // detect runs once per process
  int64_t& n = next_number[(dir / stem).string()];
  if (n == 0) n = 1;
  for (;; ++n) {
    const fs::path path = n == 1 ? dir / (stem + ".jpg") : dir / cat(stem, n, ".jpg");
    if (!fs::exists(path)) {
      ++n;
      return path;
    }
  }
}

std::string url_file_name(const std::string& url) {
  std::string decoded;
  const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = 0; i < url.size(); ++i) {
    if (url[i] == '%' && i + 2 < url.size() && hex(url[i + 1]) && hex(url[i + 2])) {
      decoded += static_cast<char>(std::stoi(url.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      decoded += url[i];
    }
  }
  return fs::path(decoded.substr(0, decoded.find('?'))).filename().string();
}

}  // namespace kestrel::app
