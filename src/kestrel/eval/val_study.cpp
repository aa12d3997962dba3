#include "kestrel/eval/val_study.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kestrel/core/error.h"
#include "kestrel/eval/plot_canvas.h"

namespace kestrel::eval {

using namespace canvas;

std::vector<int> study_image_sizes() {
  std::vector<int> sizes;
  for (int s = 256; s <= 1536; s += 128) sizes.push_back(s);
  return sizes;
}

std::string study_row(const ValidationResult& r, bool yolov7_columns, int img_size, int batch_size) {
  const auto& m = r.metrics;
  const auto& t = r.ms_per_image;  // pre-process, inference, NMS
  std::vector<double> v{m.mp, m.mr, m.map50, m.map, r.loss[0], r.loss[1], r.loss[2]};
  if (yolov7_columns) {
    // test.py: t0 (inference), t1 (NMS), t0 + t1, then imgsz, imgsz, batch_size.
    v.insert(v.end(), {t[1], t[2], t[1] + t[2], double(img_size), double(img_size), double(batch_size)});
  } else {
    v.insert(v.end(), {t[0], t[1], t[2]});
  }
  std::string row;
  char cell[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(cell, sizeof cell, "%10.4g", v[i]);
    row += (i ? " " : "") + std::string(cell);
  }
  return row;
}

std::string study_file_name(const std::string& data_yaml, const std::string& weights) {
  return "study_" + std::filesystem::path(data_yaml).stem().string() + "_" + std::filesystem::path(weights).stem().string() +
         ".txt";
}

namespace {

struct StudyCurve {
  std::string label;
  std::vector<double> ms, map;  // x, y
};

StudyCurve read_study(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, ": cannot read");
  std::vector<double> speed, map;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream row(line);
    std::vector<double> v;
    for (double x; row >> x;) v.push_back(x);
    if (!row.eof()) fail(path, ":", number, ": not a row of numbers");
    if (v.size() != 10 && v.size() != 13)
      fail(path, ":", number, ": ", v.size(), " values; a study row has 10 (val.py) or 13 (YOLOv7 test.py)");
    speed.push_back(v.size() == 10 ? v[8] : v[9]);  // upstream's usecols[5] / usecols[6]
    map.push_back(v[3] * 100);
  }
  if (map.empty()) fail(path, ": no rows");
  // Upstream plots y[1:j], j = argmax + 1: from the second size to the best one. When the best is the first
  // size that is nothing; kestrel then draws every size.
  size_t begin = 1, end = static_cast<size_t>(std::max_element(map.begin(), map.end()) - map.begin()) + 1;
  if (end <= begin) begin = 0, end = map.size();
  StudyCurve c;
  c.label = std::filesystem::path(path).stem().string();
  // upstream's label: the stem with "study_coco_" removed and "yolo" written "YOLO"
  for (size_t at; (at = c.label.find("study_coco_")) != std::string::npos;) c.label.erase(at, 11);
  for (size_t at = 0; (at = c.label.find("yolo", at)) != std::string::npos; at += 4) c.label.replace(at, 4, "YOLO");
  for (size_t k = begin; k < end; ++k) c.ms.push_back(speed[k]), c.map.push_back(map[k]);
  return c;
}

}  // namespace

void plot_study(std::vector<std::string> study_files, const std::string& png_path) {
  std::sort(study_files.begin(), study_files.end());
  std::vector<StudyCurve> curves;
  double x1 = 1, y0 = 1e9, y1 = -1e9;
  for (const auto& f : study_files) {
    curves.push_back(read_study(f));
    for (double x : curves.back().ms) x1 = std::max(x1, x);
    for (double y : curves.back().map) y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
  if (y0 > y1) y0 = 0, y1 = 1;  // nothing to draw (every best mAP at the first size)
  const double pad = std::max((y1 - y0) * 0.1, 0.5);
  // (8, 4) inches at 250 dpi, as the other charts' scale; the ranges follow the data (upstream fixes them
  // for COCO: 0-57 ms, 25/30-55 AP).
  cv::Mat img(1000, 2000, CV_8UC3, kWhite);
  Axes ax{cv::Rect(170, 60, 1380, 800), 0, x1 * 1.1, std::max(0.0, y0 - pad), y1 + pad};
  draw_axes(img, ax, "Speed (ms/img)", "mAP@.5:.95 val (x 100)", "", 0.9);
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < curves.size(); ++i) {
    const auto& c = curves[i];
    curve(img, ax, c.ms, c.map, tab10(i), 3);
    for (size_t k = 0; k < c.ms.size(); ++k) cv::circle(img, ax.map(c.ms[k], c.map[k]), 8, tab10(i), cv::FILLED, cv::LINE_AA);
    entries.push_back({c.label, tab10(i), 3});
  }
  legend(img, ax, entries, 0.8);
  save(img, png_path);
}

}  // namespace kestrel::eval
