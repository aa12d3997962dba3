// Which files make up a split, and where each image's label file is.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace kestrel::data {

// Lower-case extensions upstream accepts as images.
bool has_image_extension(const std::string& path);
// The extensions has_image_extension takes, for messages: "images: bmp dng ...".
std::string image_formats_text();

// Expands entries (folders searched recursively, .txt files listing one image per line, image files)
// into a sorted list of image paths. Lines of a .txt that are relative resolve against the .txt's
// folder. A missing entry is an error naming `source` and the entry.
std::vector<std::string> list_images(const std::vector<std::string>& entries, const std::string& source);

// The same for any file `wanted` accepts (detect's images and videos), and entries may be glob patterns
// (`*`, `?`, `[...]`; `**` also spans folders, as Python's glob(recursive=True) in detect.py). A pattern
// that matches no file is an error naming `source` and the pattern; so is a file given by name that
// `wanted` refuses, with `supported` (the formats `wanted` takes) in the message.
std::vector<std::string> list_files(const std::vector<std::string>& entries, const std::string& source,
                                    const std::function<bool(const std::string&)>& wanted,
                                    const std::string& supported = image_formats_text());

// Upstream's rule: the last "/images/" of the path becomes "/labels/" and the extension ".txt".
std::string label_path_for(const std::string& image_path);

}  // namespace kestrel::data
