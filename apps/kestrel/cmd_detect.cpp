// kestrel detect: YOLOv5 detect.py on images (a file, a folder or a .txt list), a video file, a camera
// index or a stream URL: annotated copies (or an annotated .mp4) and, with --save-txt, YOLO label files in runs/detect/<name>/.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <algorithm>

#include <ATen/ATen.h>

#include "commands.h"
#include "detect_outputs.h"
#include "detect_source.h"
#include "kestrel/core/atomic_file.h"
#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/core/regular_file.h"
#include "kestrel/core/stop_signal.h"
#include "kestrel/data/annotate.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/stream_grabber.h"
#include "kestrel/data/video_io.h"
#include "kestrel/eval/coco_eval.h"
#include "kestrel/eval/detector.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "kestrel/models/model_family.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/train/run_files.h"

namespace kestrel::app {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultSource = "data/demo/images/val";

struct DetectOptions {
  std::string weights, source = kDefaultSource, device, project = "runs/detect", name = "exp", data;
  std::vector<int> imgsz{640};
  double conf_thres = 0.25, iou_thres = 0.45;
  int max_det = 1000, line_thickness = 3, vid_stride = 1, save_format = 0;
  bool max_det_given = false;
  std::vector<int> classes;
  bool agnostic_nms = false, save_txt = false, save_conf = false, save_csv = false, save_json = false, nosave = false;
  bool exist_ok = false;
  bool hide_labels = false, hide_conf = false, half = false, augment = false, save_crop = false, visualize = false;
};

// Where one image's or frame's outputs go: its label file, the stem of its crops and --visualize folder,
// and its name in predictions.csv (detect.py's p.name: the image's or video's file name; for images in
// subfolders of a --source folder, with the subfolders, as their annotated copies).
struct FrameOutputs {
  fs::path txt;
  std::string stem, csv_name;
  int64_t image_id = 0;  // in predictions.json
};

// --save-json: the run's detections in COCO's results format, written as <run>/predictions.json at the
// end; category ids as val.py's (COCO's 91-ids for a COCO --data, else the class index).
struct JsonPredictions {
  std::vector<int> category_ids;
  std::vector<eval::CocoDetection> detections;
  int64_t next_frame_id = 1;  // video and camera frames are numbered after the images
};

// Appends an image's rows to <run>/predictions.csv, which starts with its header when new (as detect.py,
// which appends to the file of an earlier run with --exist-ok).
void append_predictions_csv(const fs::path& csv, const std::string& rows) {
  const bool fresh = !fs::exists(csv) || fs::file_size(csv) == 0;
  std::ofstream out(csv, std::ios::binary | std::ios::app);
  if (fresh) out << eval::kPredictionsCsvHeader;
  out << rows;
  if (!out) fail(csv.string(), ": write failed");
}

// Appends an annotated frame to `writer`, which is made with the first frame (its size; mp4v at `fps`).
// A frame of another size (a stream that changed resolution) is left out of the video with a warning, as
// cv2.VideoWriter drops it, and detection goes on; frame_number names it.
void write_video_frame(std::unique_ptr<data::VideoWriter>& writer, const fs::path& path, double fps, const cv::Mat& frame,
                       const std::string& source, int64_t frame_number) {
  if (!writer) writer = data::create_video(path.string(), fps, frame.size());
  static std::set<std::string> warned;  // once per video file: a stream that changed for good would warn every frame
  if (!writer->write(frame) && warned.insert(path.string()).second)
    std::cerr << "WARNING: " << source << ": frame " << frame_number << " is " << frame.cols << "x" << frame.rows
              << ", unlike the frames before it: it and later frames of another size are not written to " << path.string() << "\n";
}

// One image or video frame: its label file (written whole, one line per detection in upstream's order:
// reversed, least confident first) and its predictions.csv rows (same order), with --save-crop each box
// cut from the unannotated image into crops/<class name>/<stem>.jpg (same order), the boxes drawn in
// place, and upstream's per-image line.
void detect_one(eval::Detector& detector, cv::Mat& image, const DetectOptions& o, const std::vector<std::string>& names,
                const FrameOutputs& frame, const fs::path& save_dir, const std::string& prefix, JsonPredictions& json) {
  const fs::path& txt = frame.txt;
  const std::string& stem = frame.stem;
  // --visualize: every layer's output into <run>/<stem>/ (stem2, stem3 ... when taken, as increment_path).
  const std::string features = o.visualize ? train::make_run_dir(save_dir.string(), stem, false, false) : "";
  const eval::Detections det = detector.detect(image, features);
  const int64_t count = det.boxes.size(0);
  if (o.save_txt && count == 0) {  // nothing found: no file, also none left from an earlier run (--exist-ok)
    std::error_code ec;
    fs::remove(txt, ec);
  }
  if (o.save_txt && count > 0) {
    fs::create_directories(txt.parent_path());
    std::ofstream out(txt);  // one write per image: a rerun with --exist-ok replaces the file
    for (int64_t k = count - 1; k >= 0; --k)
      out << eval::label_line(det.boxes[k], image.size(), o.save_conf, static_cast<eval::LabelFormat>(o.save_format)) << "\n";
    if (!out) fail(txt.string(), ": write failed");
  }
  if (o.save_csv && count > 0) {
    std::string rows;
    for (int64_t k = count - 1; k >= 0; --k) {
      const auto cls = static_cast<size_t>(det.boxes[k][5].item<float>());
      rows += eval::predictions_csv_row(frame.csv_name, cls < names.size() ? names[cls] : std::to_string(cls),
                                        det.boxes[k][4].item<float>());
    }
    append_predictions_csv(save_dir / "predictions.csv", rows);
  }
  if (o.save_json && count > 0) {  // val.py's save_one_json: most confident first, bbox [x, y, w, h]
    const at::Tensor rows = det.boxes.to(at::kCPU, at::kDouble).contiguous();
    const auto b = rows.accessor<double, 2>();
    for (int64_t k = 0; k < count; ++k) {
      const auto cls = static_cast<size_t>(b[k][5]);
      const int64_t category = cls < json.category_ids.size() ? json.category_ids[cls] : static_cast<int64_t>(cls);
      json.detections.push_back(eval::coco_detection(frame.image_id, category, b[k][0], b[k][1], b[k][2], b[k][3], b[k][4]));
    }
  }
  for (int64_t k = count - 1; o.save_crop && k >= 0; --k) {
    const cv::Rect region = eval::crop_region(det.boxes[k], image.size());
    if (region.empty()) continue;  // a box squeezed flat against an edge: nothing to cut
    const auto cls = static_cast<size_t>(det.boxes[k][5].item<float>());
    const fs::path dir = save_dir / "crops" / eval::crop_folder_name(names, cls);
    fs::create_directories(dir);
    data::write_jpeg(free_crop_path(dir, stem).string(), image(region), 95, /*full_chroma=*/true);
  }
  if (!o.nosave) data::draw_detections(image, det.boxes, names, {o.line_thickness, o.hide_labels, o.hide_conf});
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1fms", detector.last_inference_ms());
  std::cout << prefix << det.input_size.height << "x" << det.input_size.width << " "
            << eval::summarize_detections(det.boxes, names) << ms << std::endl;
}

// A video file (detect.py's LoadImages; cameras and streams go to detect_streams): every frame (every
// --vid-stride-th) detected and written to <run>/<video stem>.mp4 (mp4v, the source's frame rate, as
// detect.py), labels per frame in labels/<stem>_<n>.txt (n counts the frames detected, from 1, as upstream;
// the total shown is frames / stride). With a stride s, the source's first video gives frames s - 1, 2s - 1,
// ... and every later one 0, s, 2s, ..., as LoadImages (it reads a newly opened video's first frame
// without skipping).
// `position`: "video i/n", its place among the source's files; `file_stem`: the output stem (video_stems),
// empty for a single --source video. False when not one frame could be read (nothing was written).
bool detect_video(eval::Detector& detector, data::VideoReader& video, const std::string& source, const std::string& position,
                  const DetectOptions& o, const std::vector<std::string>& names, const fs::path& save_dir, JsonPredictions& json,
                  bool first_video, const std::string& file_stem = "") {
  // A URL names the outputs and predictions.csv's rows as the file upstream downloads it to (check_file:
  // the name of unquote(url) up to any '?').
  const std::string file_name = data::is_stream_url(source) ? url_file_name(source) : fs::path(source).filename().string();
  std::string stem = !file_stem.empty() ? file_stem : fs::path(file_name).stem().string();
  if (stem.empty()) stem = "video";
  const fs::path out = save_dir / (stem + ".mp4");
  const std::string& csv_name = file_name;
  const int64_t frames = video.frame_count() / o.vid_stride;
  std::unique_ptr<data::VideoWriter> writer;
  cv::Mat frame;
  const std::string shown = data::is_stream_url(source) ? source : shown_path(source, o.source);  // resolved once, not per frame
  int64_t f = 0, read = 0;
  const auto next = [&] {  // upstream grabs vid_stride frames and keeps (retrieves) the last
    const int steps = f == 0 && !first_video ? 1 : o.vid_stride;
    for (int s = 0; s < steps; ++s) {
      if (!(s + 1 < steps ? video.skip() : video.read(frame))) return false;
      ++read;
    }
    return true;
  };
  while (!StopSignal::requested() && next()) {
    ++f;
    const std::string prefix = cat(position, " (", f, "/", frames, ") ", shown, ": ");
    // Label files count a video's frames from 1 (upstream's LoadImages counter).
    detect_one(detector, frame, o, names,
               {save_dir / "labels" / cat(stem, "_", f, ".txt"), stem, csv_name, json.next_frame_id++}, save_dir, prefix, json);
    if (o.nosave) continue;
    write_video_frame(writer, out, video.fps() <= 0 ? 30.0 : video.fps(), frame, source, f);
  }
  if (StopSignal::requested()) return true;
  if (read == 0) return false;
  if (f == 0) {  // upstream yields nothing either
    std::cout << "WARNING: " << source << ": " << read << " frames, fewer than --vid-stride " << o.vid_stride
              << ": none detected" << std::endl;
    return true;
  }
  // A frame that does not decode ends the video (upstream goes on to the next file). The container's count
  // can also be an estimate (duration x fps), so this says what happened rather than what was lost.
  if (frames > 0 && f < frames)
    std::cout << "WARNING: " << source << ": ended after frame " << f << " although the container announced " << frames
              << " (a frame that cannot be decoded ends a video)" << std::endl;
  return true;
}

// A .streams list, or one camera or stream (detect.py's LoadStreams): each source read on its own thread
// (data/stream_grabber.h: a live source offers its newest frame, a file every frame); each round detects
// one frame of every source, until one of them ends. Per source, as upstream: <stem>.mp4 at 30 fps,
// labels/<stem>_<round>.txt with rounds from 0, predictions.csv named Path(clean_str(source)).name; a stem
// wanted twice gets an increment (live, live2), where upstream's outputs would overwrite each other.
// LoadStreams' line for a source it opened: "1/2: rtsp://...  Success (inf frames 640x480 at 30.00 FPS)". Its
// frame count (inf when the container gives none) and frame rate as it shows them: the rate modulo 100, 30
// when that is 0 or not a number.
std::string stream_opened_line(size_t i, size_t n, const std::string& source, int64_t frames, cv::Size size, double fps) {
  const double rate = std::isfinite(fps) ? fps - 100.0 * std::floor(fps / 100.0) : 0.0;  // Python's fps % 100
  char shown[64];
  std::snprintf(shown, sizeof shown, "%.2f", rate > 0 ? rate : 30.0);
  return cat(i + 1, "/", n, ": ", source, "...  Success (", frames > 0 ? std::to_string(frames) : std::string("inf"),
             " frames ", size.width, "x", size.height, " at ", shown, " FPS)");
}

void detect_streams(eval::Detector& detector, std::vector<std::unique_ptr<data::StreamGrabber>>& streams,
                    const std::vector<std::string>& sources, const std::vector<std::pair<int64_t, double>>& counts_and_rates,
                    const DetectOptions& o, const std::vector<std::string>& names, const fs::path& save_dir,
                    JsonPredictions& json) {
  const size_t n = sources.size();
  std::vector<std::string> csv_names;
  for (const std::string& source : sources) csv_names.push_back(eval::stream_csv_name(source));
  const std::vector<std::string> stems = video_stems(csv_names, {}, /*save_txt=*/false);
  std::vector<std::unique_ptr<data::VideoWriter>> writers(n);
  std::vector<cv::Mat> frames(n);
  for (int64_t round = 0; !StopSignal::requested(); ++round) {
    size_t ended = n;
    // One deadline for the round: a stalled source delays the others once, not once each.
    const auto deadline = data::StreamGrabber::Clock::now() + streams[0]->patience();
    for (size_t i = 0; i < n && ended == n; ++i)
      if (!streams[i]->next(frames[i], deadline)) ended = i;
    if (ended < n) {
      if (round == 0) fail(sources[ended], ": no frame could be read");
      std::cout << sources[ended] << ": ended after " << round << " frames"
                << (n > 1 ? cat("; stopping the ", n, " streams") : std::string()) << std::endl;
      break;
    }
    if (round == 0) {  // LoadStreams says so once it has each source's first frame
      for (size_t i = 0; i < n; ++i)
        std::cout << stream_opened_line(i, n, sources[i], counts_and_rates[i].first, frames[i].size(),
                                        counts_and_rates[i].second) << "\n";
      std::cout << std::endl;
    }
    for (size_t i = 0; i < n; ++i) {
      detect_one(detector, frames[i], o, names,
                 {save_dir / "labels" / cat(stems[i], "_", round, ".txt"), stems[i], csv_names[i], json.next_frame_id++},
                 save_dir, cat(i, ": "), json);
      if (o.nosave) continue;
      write_video_frame(writers[i], save_dir / (stems[i] + ".mp4"), 30.0, frames[i], sources[i], round);
    }
  }
}

// A file, folder, glob or .txt list: its images, then its videos (each sorted), numbered "image i/n" and
// "video i/n" over all of them, as detect.py's LoadImages (files = images + videos); unreadable images are
// reported and skipped.
void detect_files(eval::Detector& detector, const std::vector<std::string>& files, const DetectOptions& o,
                  const std::vector<std::string>& names, const fs::path& save_dir, JsonPredictions& json) {
  std::vector<std::string> images, media;
  for (const std::string& file : files)
    if (!data::is_video_file(file)) images.push_back(file);
  media = images;
  for (const std::string& file : files)
    if (data::is_video_file(file)) media.push_back(file);
  const std::vector<OutputNames> outputs = output_names(images, o.source);
  // predictions.csv's image names: the file name (with its subfolder under a --source folder); where a
  // glob or list holds two images of one file name, the path as listed (upstream writes both as p.name).
  std::vector<std::string> csv_names;
  std::map<std::string, int> uses;
  for (size_t k = 0; k < images.size(); ++k)
    ++uses[csv_names.emplace_back((outputs[k].annotated.parent_path() / fs::path(images[k]).filename()).string())];
  for (size_t k = 0; k < images.size(); ++k)
    if (uses[csv_names[k]] > 1) csv_names[k] = images[k];
  // predictions.json's image ids: `kestrel data coco`'s (numeric stems, else 1..n); video frames after them.
  const std::vector<int64_t> image_ids = eval::coco_image_ids(images);
  for (int64_t id : image_ids) json.next_frame_id = std::max(json.next_frame_id, id + 1);
  const std::vector<std::string> stems =
      video_stems({media.begin() + static_cast<long>(images.size()), media.end()}, outputs, o.save_txt);
  int64_t skipped = 0;
  const size_t n = media.size();
  for (size_t i = 0, image = 0; i < n && !StopSignal::requested(); ++i) {
    if (data::is_video_file(media[i])) {
      // A video that cannot be opened or gives no frame is reported and skipped like an unreadable image
      // (upstream's loader goes on to the next file); an error while detecting or writing stops the run.
      const std::string position = cat("video ", i + 1, "/", n);
      std::unique_ptr<data::VideoReader> clip;
      try {
        clip = data::open_video(media[i]);
      } catch (const Error& e) {
        std::cout << position << " " << media[i] << ": skipped (" << e.what() << ")" << std::endl;
        ++skipped;
        continue;
      }
      if (!detect_video(detector, *clip, media[i], position, o, names, save_dir, json,
                        /*first_video=*/i == images.size(), stems[i - images.size()])) {
        std::cout << position << " " << media[i] << ": skipped (no frame could be read from the video)" << std::endl;
        ++skipped;
      }
      continue;
    }
    const std::string& csv_name = csv_names[image];
    const int64_t image_id = image_ids[image];
    const OutputNames& out = outputs[image++];
    const fs::path path = media[i];
    const std::string prefix = cat("image ", i + 1, "/", n, " ", shown_path(path.string(), o.source), ": ");
    data::DecodedImage decoded;
    try {
      // A truncated JPEG is detected on, as cv2.imread reads it for detect.py (the missing part grey).
      decoded = data::decode_image_file(path.string(), /*keep_truncated=*/true);
    } catch (const Error& e) {  // reported and skipped: one bad file does not stop a folder
      std::cout << prefix << "skipped (" << e.what() << ")" << std::endl;
      ++skipped;
      continue;
    }
    if (!decoded.warning.empty()) std::cerr << "WARNING: " << path.string() << ": " << decoded.warning << "\n";
    detect_one(detector, decoded.image, o, names,
               {save_dir / "labels" / out.labels, path.stem().string(), csv_name, image_id}, save_dir, prefix, json);
    if (!o.nosave) {
      const fs::path annotated = save_dir / out.annotated;
      fs::create_directories(annotated.parent_path());
      write_annotated(annotated, decoded.image);
    }
  }
  const char* what = images.size() == n ? "images" : "files";
  if (detector.images() == 0 && !StopSignal::requested())
    fail("--source ", o.source, ": none of the ", n, " ", what, " could be read");
  if (skipped) std::printf("%lld of %zu %s skipped (unreadable, listed above)\n", static_cast<long long>(skipped), n, what);
}

// detect.py's --data names the classes only for weights without names (not .pt files) and is not even read
// otherwise; kestrel weights always carry theirs. It is read for a warning when its names differ, and a file
// that cannot be used (missing, malformed, data not downloaded) is only a warning too. Returns the dataset
// when it could be read.
std::optional<data::DatasetConfig> check_data_names(const DetectOptions& o, const std::vector<std::string>& names) {
  if (o.data.empty()) return std::nullopt;
  try {
    data::DatasetConfig dataset = data::load_dataset_config(o.data);
    if (dataset.names != names)
      std::cout << "WARNING: --data " << o.data << " names " << dataset.nc << " classes unlike the " << names.size()
                << " of " << o.weights << " (" << (names.empty() ? std::string("none") : names[0])
                << (names.size() > 1 ? ", ..." : "") << "); the class names come from the weights\n";
    return dataset;
  } catch (const Error& e) {
    std::cout << "WARNING: --data ignored (the class names come from the weights): " << e.what() << "\n";
    return std::nullopt;
  }
}

eval::DetectorOptions detector_options(const DetectOptions& o, const models::LoadedModel& loaded, c10::Device device) {
  const std::vector<std::string>& names = loaded.info.names;
  eval::DetectorOptions d;
  d.img_height = o.imgsz[0];  // --imgsz h [w], one value for both (upstream)
  d.img_width = o.imgsz.size() > 1 ? o.imgsz[1] : o.imgsz[0];
  d.nms.conf_thres = o.conf_thres;
  d.nms.iou_thres = o.iou_thres;
  d.nms.max_det = o.max_det;
  for (int c : o.classes)  // detect.py drops every box for a class the model does not have, without a word
    if (c < 0 || c >= static_cast<int>(names.size()))
      fail("--classes ", c, ": ", o.weights, " has classes 0..", names.size() - 1);
  d.nms.classes = o.classes;
  d.nms.agnostic = o.agnostic_nms;
  // YOLOv7's detect.py: its NMS, and always at most 300 detections (it has no --max-det).
  d.nms.yolov7 = models::is_yolov7_family(*loaded.model);
  if (d.nms.yolov7 && !o.max_det_given) d.nms.max_det = 300;
  d.half = o.half || (d.nms.yolov7 && device.is_cuda());  // YOLOv7's detect.py: fp16 whenever on CUDA
  d.augment = o.augment;
  return d;
}

// detect.py's closing lines: the speeds, where the results went, and (kestrel) predictions.csv's fate.
void print_summary(const DetectOptions& o, const eval::Detector& detector, const fs::path& save_dir) {
  const auto& total = detector.total_ms();
  const double seen = static_cast<double>(std::max<int64_t>(1, detector.images()));  // none when stopped at once
  const cv::Size net = detector.network_size();
  std::printf("Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (1, 3, %d, %d)\n",
              total[0] / seen, total[1] / seen, total[2] / seen, net.height, net.width);
  if (o.save_txt || !o.nosave) {
    std::cout << "Results saved to " << save_dir.string();
    if (o.save_txt) {
      int64_t labels = 0;
      for (const auto& entry : fs::recursive_directory_iterator(save_dir / "labels"))
        labels += entry.path().extension() == ".txt";
      std::cout << "\n" << labels << " labels saved to " << (save_dir / "labels").string();
    }
    std::cout << std::endl;
  }
  if (o.save_csv)  // no file when nothing was detected (upstream writes it with the first row)
    std::cout << (fs::exists(save_dir / "predictions.csv") ? "Predictions saved to " + (save_dir / "predictions.csv").string()
                                                            : std::string("No predictions to save in predictions.csv"))
              << std::endl;
}

void run_detect(const DetectOptions& o) {
  if (o.weights.empty()) fail("--weights is required (a kestrel .safetensors file)");
  const c10::Device device = parse_device(o.device);
  make_current(device);
  models::LoadedModel loaded = models::load_model_weights(o.weights);
  const std::vector<std::string>& names = loaded.info.names;
  const std::optional<data::DatasetConfig> dataset = check_data_names(o, names);
  const eval::DetectorOptions d = detector_options(o, loaded, device);
  eval::Detector detector(loaded.model, device, d);
  const cv::Size net = detector.network_size();
  if (net.height != d.img_height || net.width != d.img_width)
    std::cout << "WARNING: --img-size [" << d.img_height << ", " << d.img_width << "] must be multiple of max stride "
              << detector.stride() << ", updating to [" << net.height << ", " << net.width << "]\n";  // detect.py's lists

  DetectSource source = open_detect_source(o.source, o.project, o.name);  // before the run folder: a bad source leaves nothing
  const fs::path save_dir = train::make_run_dir(o.project, o.name, o.exist_ok, /*with_weights=*/false);
  if (o.save_txt) fs::create_directories(save_dir / "labels");
  if (o.save_csv && fs::exists(save_dir / "predictions.csv")) require_regular_file((save_dir / "predictions.csv").string());

  JsonPredictions json;
  if (o.save_json)  // val.py's class map: COCO's category ids when --data is COCO, else the class index
    json.category_ids = eval::coco_category_ids(dataset && eval::is_coco_dataset(*dataset), names.size());
  detector.warmup();
  // Ctrl-C or SIGTERM: finish the frame, close the videos (a killed writer leaves an unplayable .mp4), save
  // what was found, exit 130.
  StopSignal stop("\nStopping after this frame (again to stop at once)\n");
  // The stream readers are stopped last, after the predictions and summary are written: one stuck in a
  // network read is not waited for (data/stream_grabber.h), but a second Ctrl-C meanwhile must lose nothing.
  std::vector<std::unique_ptr<data::StreamGrabber>> streams;
  std::vector<std::pair<int64_t, double>> counts_and_rates;  // each stream's frame count and rate, as opened
  switch (source.kind) {
    case DetectSource::Kind::kStreams:
      for (size_t i = 0; i < source.stream_sources.size(); ++i) {
        counts_and_rates.emplace_back(source.stream_readers[i]->frame_count(), source.stream_readers[i]->fps());
        // Live: a camera or device, or a stream without a frame count (a remote file has one: every frame is
        // read); a regular file never is.
        const std::string& name = source.stream_sources[i];
        std::error_code ec;
        const bool live = data::is_camera_source(name) ||
                          (!fs::is_regular_file(name, ec) && source.stream_readers[i]->frame_count() <= 0);
        streams.push_back(std::make_unique<data::StreamGrabber>(std::move(source.stream_readers[i]), name, live,
                                                                o.vid_stride));
      }
      detect_streams(detector, streams, source.stream_sources, counts_and_rates, o, names, save_dir, json);
      break;
    case DetectSource::Kind::kVideo:
      if (!detect_video(detector, *source.video, o.source, "video 1/1", o, names, save_dir, json, /*first_video=*/true))
        fail(o.source, ": no frame could be read from the video");
      break;
    case DetectSource::Kind::kFiles:
      detect_files(detector, source.files, o, names, save_dir, json);
      break;
  }
  if (o.save_json) {
    const fs::path file = save_dir / "predictions.json";
    const std::string text = eval::coco_results_json(json.detections);
    write_file_atomic(file.string(), {text}, Durability::kRename);
    std::cout << "Saving " << file.string() << " (" << json.detections.size() << " detections, COCO results format)" << std::endl;
  }
  print_summary(o, detector, save_dir);
  if (StopSignal::requested()) throw CLI::RuntimeError(130);  // stopped, as a shell reports an interrupt
}

}  // namespace

void add_detect_command(CLI::App& app) {
  auto o = std::make_shared<DetectOptions>();
  auto* cmd = app.add_subcommand("detect", "detect objects in images and videos (a file, a folder, a glob or a .txt list), a camera or a stream URL");
  add_one_weights_option(cmd, o->weights, "kestrel weights (.safetensors)", "detect.py would ensemble them");
  cmd->add_option("--data", o->data, "dataset YAML (optional, as detect.py: kestrel weights carry their class names; "
                  "a warning when the YAML's differ or it cannot be read)");
  cmd->add_option("--source", o->source, "image or video file (mp4, avi, mov ...), folder (searched recursively), quoted glob ('dir/**/*.jpg'), .txt list of image and video paths (images first, as detect.py), camera index (0), stream URL (rtsp://, rtmp://, http(s)://) or .streams list of them (one per line, each read on its own thread)")
      ->capture_default_str();
  cmd->add_option("--img,--img-size,--imgsz", o->imgsz, "inference size h [w]")->capture_default_str()
      ->expected(1, 2)->check(CLI::Range(1, 8192));  // below the stride: rounded up with a warning, as detect.py
  cmd->add_option("--conf-thres,--conf", o->conf_thres, "confidence threshold")->capture_default_str()->check(unit_interval());
  cmd->add_option("--iou-thres,--iou", o->iou_thres, "NMS IoU threshold")->capture_default_str()->check(unit_interval());
  auto* max_det = cmd->add_option("--max-det", o->max_det, "maximum detections per image (YOLOv7 models: 300 unless given)")
                       ->capture_default_str()->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--device", o->device, "cuda device (0, cuda:0) or cpu");
  cmd->add_option("--classes", o->classes, "keep only these classes: --classes 0, or --classes 0 2 3");
  cmd->add_flag("--agnostic-nms", o->agnostic_nms, "class-agnostic NMS");
  cmd->add_flag("--save-txt", o->save_txt, "save results to <run>/labels/<image stem>.txt (videos: <stem>_<frame>.txt)");
  cmd->add_option("--save-format", o->save_format, "box columns of --save-txt labels: 0 YOLO (cx cy w h), 1 Pascal-VOC "
                  "(x1 y1 x2 y2), both normalised (YOLOv5 detect.py)")->capture_default_str()->check(integer_where([](long long v) { return v == 0 || v == 1; }, "0 or 1"));
  cmd->add_flag("--save-json", o->save_json, "save the detections to <run>/predictions.json in COCO's results format "
                "(image ids: numeric file stems, else 1..n; category ids: COCO's for a COCO --data, else the class index)");
  cmd->add_flag("--save-csv", o->save_csv, "save image name, class name and confidence of each detection to <run>/predictions.csv");
  cmd->add_flag("--save-conf", o->save_conf, "save confidences in --save-txt labels");
  cmd->add_flag("--save-crop", o->save_crop, "save each detection's box to <run>/crops/<class name>/<image stem>.jpg");
  cmd->add_flag("--nosave", o->nosave, "do not save annotated images");
  cmd->add_option("--project", o->project, "runs folder")->capture_default_str();
  cmd->add_option("--name", o->name, "run name")->capture_default_str();
  cmd->add_flag("--exist-ok", o->exist_ok, "reuse project/name");
  cmd->add_option("--line-thickness", o->line_thickness, "bounding box thickness (pixels; 0: 0.3 % of the image's mean side, at least 2)")
      ->capture_default_str()
      ->check(CLI::Range(0, 32767));  // OpenCV's limit on a line's thickness
  cmd->add_flag("--hide-labels", o->hide_labels, "hide labels");
  cmd->add_flag("--hide-conf", o->hide_conf, "hide confidences");
  cmd->add_flag("--half", o->half, "fp16 inference (CUDA; YOLOv7 models use it there anyway, as YOLOv7's detect.py)");
  // YOLOv7's --no-trace (do not TorchScript-trace the model): kestrel never traces.
  cmd->add_flag("--no-trace", "YOLOv7's flag, accepted: kestrel runs the model as built, without tracing");
  cmd->add_flag("--augment", o->augment, "augmented inference (scales 1, 0.83, 0.67; the middle one flipped)");
  cmd->add_flag("--visualize", o->visualize,
                "write every layer's output (first 32 channels as stage<i>_<Module>_features.png, all as .npy) to <run>/<image stem>/");
  cmd->add_flag("--update", "detect.py's flag, accepted: it strips optimizer state from .pt files, and kestrel weights "
                "hold none");
  // Spellings of detect.py that kestrel cannot honour, refused with the reason rather than CLI11's
  // "not expected".
  cmd->add_flag("--view-img", "not supported: kestrel opens no windows (the annotated images are written to the run folder)")
      ->each([](const std::string&) {
        throw CLI::ValidationError("kestrel opens no windows; the annotated images and videos are "
                                   "written to <project>/<name>/ (drop --nosave)");
      });
  cmd->add_flag("--dnn", "not supported: kestrel runs its own .safetensors weights, not ONNX through OpenCV DNN")
      ->each([](const std::string&) {
        throw CLI::ValidationError("kestrel runs its .safetensors weights with LibTorch; an exported .onnx "
                                   "runs in onnxruntime or OpenCV DNN outside kestrel (docs/deploy.md)");
      });
  cmd->add_option("--vid-stride", o->vid_stride, "video frame-rate stride (detect every n-th frame)")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  auto* source = cmd->get_option("--source");
  cmd->callback([o, max_det, source] {
    refuse_repeated({"--img", "--img-size", "--imgsz"}, "--imgsz 640 480 (height, width)");
    // detect.py's default source lies in its repository (ROOT / 'data/images'): without --source, the demo
    // images are found from any working folder (in the source tree when not below it).
    if (source->count() == 0) o->source = default_from_source_tree(kDefaultSource);
    refuse_repeated({"--classes"}, "--classes 0 2 3");
    o->max_det_given = max_det->count() > 0;
    run_detect(*o);
  });
}

}  // namespace kestrel::app
