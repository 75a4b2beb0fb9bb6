#include "store/mime.h"

#include <magic.h>

#include <algorithm>
#include <cctype>

namespace sandboxd::store {
namespace {

// One libmagic handle per thread: magic_t is not thread-safe and loading the database
// costs milliseconds.
class MagicCookie {
 public:
  MagicCookie() : cookie_(magic_open(MAGIC_MIME_TYPE)) {
    if (cookie_ && magic_load(cookie_, nullptr) != 0) {
      magic_close(cookie_);
      cookie_ = nullptr;
    }
  }
  ~MagicCookie() {
    if (cookie_) magic_close(cookie_);
  }
  MagicCookie(const MagicCookie&) = delete;
  MagicCookie& operator=(const MagicCookie&) = delete;

  std::string type_of(std::string_view bytes) {
    if (!cookie_) return {};
    const char* type = magic_buffer(cookie_, bytes.data(), bytes.size());
    return type ? type : "";
  }

 private:
  magic_t cookie_;
};

struct ExtensionType {
  std::string_view extension;
  std::string_view mime;
};

constexpr ExtensionType kExtensionTypes[] = {
    {"csv", "text/csv"},
    {"tsv", "text/tab-separated-values"},
    {"json", "application/json"},
    {"jsonl", "application/jsonl"},
    {"ndjson", "application/x-ndjson"},
    {"md", "text/markdown"},
    {"markdown", "text/markdown"},
    {"html", "text/html"},
    {"htm", "text/html"},
    {"css", "text/css"},
    {"js", "text/javascript"},
    {"mjs", "text/javascript"},
    {"ts", "text/x-typescript"},
    {"py", "text/x-python"},
    {"ipynb", "application/x-ipynb+json"},
    {"sh", "text/x-shellscript"},
    {"sql", "application/sql"},
    {"xml", "application/xml"},
    {"yaml", "application/yaml"},
    {"yml", "application/yaml"},
    {"toml", "application/toml"},
    {"svg", "image/svg+xml"},
    {"txt", "text/plain"},
    {"log", "text/plain"},
    {"tex", "application/x-tex"},
    {"rtf", "application/rtf"},
    {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
    {"docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
    {"pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
    {"xls", "application/vnd.ms-excel"},
    {"doc", "application/msword"},
    {"ppt", "application/vnd.ms-powerpoint"},
    {"odt", "application/vnd.oasis.opendocument.text"},
    {"ods", "application/vnd.oasis.opendocument.spreadsheet"},
    {"pdf", "application/pdf"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"bmp", "image/bmp"},
    {"ico", "image/vnd.microsoft.icon"},
    {"tif", "image/tiff"},
    {"tiff", "image/tiff"},
    {"mp3", "audio/mpeg"},
    {"wav", "audio/wav"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"zip", "application/zip"},
    {"tar", "application/x-tar"},
    {"gz", "application/gzip"},
    {"tgz", "application/gzip"},
    {"bz2", "application/x-bzip2"},
    {"xz", "application/x-xz"},
    {"7z", "application/x-7z-compressed"},
    {"parquet", "application/vnd.apache.parquet"},
    {"feather", "application/vnd.apache.arrow.file"},
    {"arrow", "application/vnd.apache.arrow.file"},
    {"sqlite", "application/vnd.sqlite3"},
    {"db", "application/vnd.sqlite3"},
    {"pkl", "application/octet-stream"},
    {"npy", "application/octet-stream"},
    {"wasm", "application/wasm"},
};

std::string_view type_for_extension(std::string_view filename) {
  auto dot = filename.rfind('.');
  if (dot == std::string_view::npos || dot + 1 == filename.size()) return {};
  std::string extension(filename.substr(dot + 1));
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& entry : kExtensionTypes) {
    if (entry.extension == extension) return entry.mime;
  }
  return {};
}

bool is_textual(std::string_view mime) {
  return mime.starts_with("text/") || mime == "application/json" || mime == "application/xml" ||
         mime == "image/svg+xml" || mime == "application/yaml" || mime == "application/toml" ||
         mime == "application/sql" || mime == "application/x-tex" || mime == "application/x-ipynb+json" ||
         mime == "application/jsonl" || mime == "application/x-ndjson";
}

// libmagic says nothing useful about these, or (for text) guesses a language from a
// few keywords ("text/x-c" for CSS, "text/plain" for CSV), so the extension decides.
bool extension_should_decide(std::string_view magic_type, std::string_view extension_type) {
  if (magic_type.empty() || magic_type == "text/plain" || magic_type == "application/octet-stream" ||
      magic_type == "inode/x-empty" || magic_type == "application/x-empty") {
    return true;
  }
  // Office documents and other zip-based formats are zip archives to libmagic.
  if (magic_type == "application/zip") return !is_textual(extension_type);
  return magic_type.starts_with("text/") && is_textual(extension_type);
}

// Text a person would read: no NUL and no control bytes besides whitespace and ESC.
// Bytes >= 0x80 pass, so UTF-8 and Latin-1 text both count.
bool looks_like_text(std::string_view head) {
  return std::none_of(head.begin(), head.end(), [](char c) {
    auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r' && byte != '\f' && byte != 0x1b) ||
           byte == 0x7f;
  });
}

}  // namespace

std::string detect_mime(std::string_view filename, std::string_view head) {
  std::string_view extension_type = type_for_extension(filename);
  // libmagic spends ~200 us on a text file only to say text/plain or guess a language,
  // and for text the extension would win anyway; binary formats are quick for it.
  if (is_textual(extension_type) && looks_like_text(head)) return std::string(extension_type);
  thread_local MagicCookie magic;
  std::string magic_type = magic.type_of(head);
  if (!extension_type.empty() && extension_should_decide(magic_type, extension_type)) {
    return std::string(extension_type);
  }
  if (magic_type.empty() || magic_type == "inode/x-empty" || magic_type == "application/x-empty") {
    return "application/octet-stream";
  }
  return magic_type;
}

}  // namespace sandboxd::store
