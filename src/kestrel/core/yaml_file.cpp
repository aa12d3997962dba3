#include "kestrel/core/yaml_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "kestrel/core/error.h"
#include "kestrel/core/python_repr.h"
#include "kestrel/core/regular_file.h"
#include "kestrel/core/utf8.h"

namespace kestrel {

namespace {

// A key given twice in one mapping: PyYAML keeps the last value, yaml-cpp's lookup finds the first, so
// upstream and kestrel would read the file differently; it is an error here, with both lines. Aliases
// repeat a node wherever they stand (nine nested lists of nine make 387 million entries of a few lines):
// the walk stops after `budget` nodes, more than any real config, hyp or dataset file holds.
void reject_duplicate_keys(const YAML::Node& node, const std::string& source, int64_t& budget) {
  if (--budget < 0) return;
  if (node.IsSequence())
    for (const YAML::Node& item : node) reject_duplicate_keys(item, source, budget);
  if (!node.IsMap()) return;
  std::map<std::string, int> lines;  // scalar key -> its line (1-based)
  for (const auto& item : node) {
    if (item.first.IsScalar()) {
      const int line = item.first.Mark().line + 1;
      const auto [at, fresh] = lines.emplace(item.first.Scalar(), line);
      if (!fresh)
        fail(source, ":", line, ": '", item.first.Scalar(), "' is given twice (also on line ", at->second,
             "); give each key once");
    }
    reject_duplicate_keys(item.second, source, budget);
  }
}

// Notes where each document's root node starts (its document's start where it has none); ignores the rest.
struct DocumentCounter : YAML::EventHandler {
  std::vector<YAML::Mark> starts;
  bool root_pending = false;
  void node(const YAML::Mark& mark) {
    if (root_pending) starts.back() = mark, root_pending = false;
  }
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark), root_pending = true; }
  void OnDocumentEnd() override { root_pending = false; }
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override { node(mark); }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}
};

}  // namespace

YAML::Node parse_yaml_text(const std::string& raw, const std::string& source) {
  // Upstream reads its YAML files with errors='ignore': bytes that are not UTF-8 (a Latin-1 comment or
  // name) are dropped, said here. Kept, they would stop the run at its first save (JSON metadata).
  const Utf8Text utf8 = drop_invalid_utf8(raw);
  // Line breaks as Python's text mode reads them (universal newlines): yaml-cpp takes a lone \r for no break.
  std::string text;
  text.reserve(utf8.text.size());
  for (size_t i = 0; i < utf8.text.size(); ++i) {
    if (utf8.text[i] != '\r') text += utf8.text[i];
    else if (i + 1 == utf8.text.size() || utf8.text[i + 1] != '\n') text += '\n';
  }
  if (utf8.dropped)
    std::cerr << "warning: " << source << ":" << 1 + std::count(raw.begin(), raw.begin() + static_cast<long>(utf8.first_invalid), '\n')
              << ": " << utf8.dropped << " byte(s) that are not UTF-8 ignored, as upstream reads the file\n";
  // Documents counted with yaml-cpp's event parser, at most two: YAML::LoadAll never ends on text such as
  // "[a]," (each call after the flow sequence yields another empty document, until memory runs out).
  DocumentCounter counter;
  YAML::Node document;
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    while (counter.starts.size() < 2 && parser.HandleNextDocument(counter)) {
    }
    // yaml-cpp ends a document where the indentation falls back below its first line's, so an indented
    // first key leaves the rest of the file to a second document (PyYAML: "expected '<document start>'").
    if (counter.starts.size() > 1)
      fail(source, ":", counter.starts[1].line + 1, ": a second YAML document starts here; the file must hold one ",
           "(is a line above indented unlike the lines below it? or a '---' separator? or text after the end of a list?)");
    if (counter.starts.empty()) return YAML::Node();  // empty, or comments only
    document = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": malformed YAML: ", e.msg);
  }
  int64_t budget = 1'000'000;
  reject_duplicate_keys(document, source, budget);
  return document;
}

std::string yaml_float(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string text = python_float_repr(v);
  // PyYAML's represent_float: "5e-05" would read back as a string, so a point goes before the exponent.
  if (text.find('.') == std::string::npos) {
    const size_t e = text.find('e');
    if (e != std::string::npos) text.insert(e, ".0");
  }
  return text;
}

YAML::Node load_yaml_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path, ": ", what, " file not found");
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a directory, expected a ", what, " YAML file");
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_yaml_text(text.str(), path);
}

}  // namespace kestrel
