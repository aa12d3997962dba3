// Where kestrel detect's outputs go: the annotated copies' and label files' names in the run folder (upstream's,
// with increments where upstream would overwrite), video output stems, crop paths, and paths as shown.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace kestrel::app {

// Annotated images keep the source's file name and format where kestrel encodes it (JPEG at cv2.imwrite's
// quality 95, PNG); other formats (BMP, TIFF, WebP ...) are written as JPEG with ".jpg" in place of the
// extension (upstream: the source's format).
std::string annotated_name(const std::filesystem::path& source);
// Writes an annotated copy in the format its name says (PNG, else JPEG at quality 95).
void write_annotated(const std::filesystem::path& path, const cv::Mat& image);

// Paths as detect.py prints them: LoadImages resolves its source (absolute, links followed) and lists a
// folder's files below that, unresolved; a file given by itself or in a list is resolved.
std::string shown_path(const std::string& path, const std::string& source);

// Where each image's outputs go, relative to the run folder: upstream's names (the annotated image under
// its file name, the label file under its stem) for a folder's own images, a file or a list; for images in
// subfolders of a --source folder (which upstream does not search) the same subfolders, so that a/x.jpg and
// b/x.jpg do not overwrite each other. Every image first claims its own name; a name wanted by a second
// image (x.jpg and x.png both label x.txt; a list naming two x.jpg) gets upstream's increment x2, x3, ...,
// skipping names that other images have as their own. Images whose annotated copy keeps their file name
// (JPEG, PNG) claim first: x.bmp (written as a JPEG) beside x.jpg gets x2.jpg and labels/x2.txt.
struct OutputNames {
  std::filesystem::path annotated;  // e.g. a/x.jpg
  std::filesystem::path labels;     // e.g. a/x.txt (under labels/)
};
std::vector<OutputNames> output_names(const std::vector<std::string>& images, const std::string& source);

// The output stem of each video of a file source (<run>/<stem>.mp4, labels/<stem>_<frame>.txt): its file's
// stem ("stream" for an empty one or one with ':'), or stem2, stem3 ... when another video has that stem
// (a/v.avi, b/v.mov: upstream overwrites one with the other) or, with --save-txt, when an image's label
// file would be one of its frame files (an image v_1.jpg).
std::vector<std::string> video_stems(const std::vector<std::string>& videos, const std::vector<OutputNames>& images,
                                     bool save_txt);

// upstream's increment_path for a crop: dir/stem.jpg, else dir/stem2.jpg, dir/stem3.jpg, ... Each (folder,
// stem) remembers where its search ended, so a video's thousands of crops of one class cost one check each
// (upstream checks from 2 every time), and there is no last number to overwrite (upstream stops at 9999).
std::filesystem::path free_crop_path(const std::filesystem::path& dir, const std::string& stem);

// Python's Path(urllib.parse.unquote(url).split('?')[0]).name: %XX escapes decoded (others kept as written).
std::string url_file_name(const std::string& url);

}  // namespace kestrel::app
