// text_editor_code_execution (docs/http-api.md) on the host side of a container's mounts.
//
// Code in the sandbox owns these directories and may fill them with symlinks, FIFOs or
// devices meant to make the (privileged) server read or write something on the host.
// So every file is reached with open_beneath() from an O_PATH fd of its mount's host
// directory, never by a host path, and every write lands through a directory fd that
// was itself opened beneath the mount.

#include "tools/text_editor.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/ids.h"
#include "base/temp_files.h"
#include "base/unique_fd.h"
#include "base/utf8.h"

namespace sandboxd::tools {
namespace {

namespace json = boost::json;

constexpr std::string_view kUnavailable = "unavailable";
constexpr std::string_view kInvalidInput = "invalid_tool_input";

// How much of a file decides whether it is text: enough to catch real binaries (their
// headers hold NULs or stray bytes), little enough that one odd byte deep inside a big
// log does not hide the whole file.
constexpr size_t kBinarySniffBytes = 8192;

// ---------------------------------------------------------------------------------
// Errors: thrown anywhere below run_text_editor and turned into an error block there.

class EditorError : public std::runtime_error {
 public:
  EditorError(std::string_view code, const std::string& explanation)
      : std::runtime_error(explanation), code_(code) {}
  std::string_view code() const { return code_; }

 private:
  std::string_view code_;
};

[[noreturn]] void fail(const std::string& explanation) { throw EditorError(kUnavailable, explanation); }
[[noreturn]] void reject_input(const std::string& explanation) {
  throw EditorError(kInvalidInput, explanation);
}

json::object error_block(std::string_view code, std::string_view explanation, bool include_detail) {
  json::object error;
  error["type"] = "text_editor_code_execution_tool_result_error";
  error["error_code"] = code;
  error["error_message"] = explanation;  // Anthropic's field; `detail` is the Zylon extension
  if (include_detail) error["detail"] = json::object{{"code", code}, {"explanation", explanation}};
  return error;
}

// ---------------------------------------------------------------------------------
// File descriptors.

// Explains why opening `path` failed with `err`, in the contract's words.
[[noreturn]] void fail_to_open(int err, const ResolvedPath& path) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:  // a component on the way is a file: there is no such file either
      fail("File not found: " + path.sandbox_path);
    case EXDEV:  // RESOLVE_BENEATH refused: an absolute symlink or `..` left the mount
      fail("Path '" + path.sandbox_path + "' leads outside its mount through a symbolic link");
    case ELOOP:
      fail("Too many levels of symbolic links: " + path.sandbox_path);
    case EACCES:
    case EPERM:
      fail("Permission denied: " + path.sandbox_path);
    default:
      fail("Cannot open " + path.sandbox_path + ": " + std::strerror(err));
  }
}

// open_beneath() that explains its failure instead of returning -errno.
UniqueFd open_beneath_or_fail(int root_fd, const std::string& relative, int flags, const ResolvedPath& path) {
  int fd = open_beneath(root_fd, relative, flags);
  if (fd < 0) fail_to_open(-fd, path);
  return UniqueFd(fd);
}

UniqueFd open_mount_root(const ResolvedPath& path) {
  // host_root comes from the server's own configuration, never from the sandbox.
  int fd = ::open(path.host_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("The mount holding " + path.sandbox_path + " is not available: " + std::strerror(errno));
  return UniqueFd(fd);
}

struct stat stat_or_fail(int fd, const ResolvedPath& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("Cannot stat " + path.sandbox_path + ": " + std::strerror(errno));
  return st;
}

// The host path the kernel reports for an open fd.
std::string fd_host_path(int fd) {
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::string target(4096, '\0');
  ssize_t n = ::readlink(link.c_str(), target.data(), target.size());
  if (n < 0 || static_cast<size_t>(n) >= target.size()) return {};
  target.resize(static_cast<size_t>(n));
  return target;
}

// ---------------------------------------------------------------------------------
// Text: lines, UTF-8.

// Every piece between newlines: "a\nb\n" gives {"a", "b", ""}.
std::vector<std::string_view> split_on_newlines(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (;;) {
    auto newline = text.find('\n');
    if (newline == std::string_view::npos) {
      pieces.push_back(text);
      return pieces;
    }
    pieces.push_back(text.substr(0, newline));
    text.remove_prefix(newline + 1);
  }
}

// Lines as an editor counts them: a final newline ends the last line instead of
// starting an empty one, so "a\nb\n" and "a\nb" both have two lines and "" has none.
std::vector<std::string_view> split_lines(std::string_view text) {
  auto lines = split_on_newlines(text);
  if (lines.back().empty()) lines.pop_back();
  return lines;
}

std::string join_lines(const std::vector<std::string_view>& lines) {
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) text += '\n';
    text += lines[i];
  }
  return text;
}

bool ends_with_newline(std::string_view text) { return !text.empty() && text.back() == '\n'; }

// A file is binary when its first bytes hold a NUL or are not UTF-8. A character cut in
// two by the sniff limit is judged on the whole file, so it does not count against it.
bool looks_binary(std::string_view content) {
  size_t sniff_end = std::min(content.size(), kBinarySniffBytes);
  for (size_t i = 0; i < sniff_end;) {
    if (content[i] == '\0') return true;
    size_t length = utf8_sequence_length(content, i);
    if (length == 0) return true;
    i += length;
  }
  return false;
}

// ---------------------------------------------------------------------------------
// Input.

enum class Command { kView, kCreate, kStrReplace, kInsert };

struct ViewRange {
  int64_t start;
  int64_t end;  // -1: through the last line
};

struct Request {
  Command command = Command::kView;
  std::string command_name;
  std::string path;
  std::optional<ViewRange> view_range;  // view
  std::string file_text;                // create
  std::string old_str, new_str;         // str_replace
  int64_t insert_line = 0;              // insert
  std::string insert_text;              // insert

  bool writes() const { return command != Command::kView; }
};

std::string require_string(const json::object& input, std::string_view field, std::string_view command) {
  const json::value* value = input.if_contains(field);
  if (value == nullptr || value->is_null()) {
    reject_input("Missing required parameter '" + std::string(field) + "' for command '" +
                 std::string(command) + "'");
  }
  if (!value->is_string()) reject_input("Parameter '" + std::string(field) + "' must be a string");
  return std::string(value->get_string());
}

// JSON integers arrive as int64 or uint64; 3.0 or "3" are not integers.
std::optional<int64_t> as_integer(const json::value& value) {
  if (value.is_int64()) return value.get_int64();
  if (value.is_uint64() && value.get_uint64() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(value.get_uint64());
  }
  return std::nullopt;
}

std::optional<ViewRange> parse_view_range(const json::object& input) {
  const json::value* value = input.if_contains("view_range");
  if (value == nullptr || value->is_null()) return std::nullopt;
  const char* shape = "Parameter 'view_range' must be an array of two integers [start, end]";
  if (!value->is_array() || value->get_array().size() != 2) reject_input(shape);
  auto start = as_integer(value->get_array()[0]);
  auto end = as_integer(value->get_array()[1]);
  if (!start || !end) reject_input(shape);
  return ViewRange{*start, *end};
}

int64_t parse_insert_line(const json::object& input) {
  const json::value* value = input.if_contains("insert_line");
  if (value == nullptr || value->is_null()) {
    reject_input("Missing required parameter 'insert_line' for command 'insert'");
  }
  auto line = as_integer(*value);
  if (!line) reject_input("Parameter 'insert_line' must be an integer");
  if (*line < 0) reject_input("Parameter 'insert_line' must be 0 or more, got " + std::to_string(*line));
  return *line;
}

Request parse_request(const json::object& input) {
  Request request;
  const json::value* command = input.if_contains("command");
  if (command == nullptr || command->is_null()) reject_input("Missing required parameter 'command'");
  if (!command->is_string()) reject_input("Parameter 'command' must be a string");
  request.command_name = std::string(command->get_string());
  if (request.command_name == "view") {
    request.command = Command::kView;
  } else if (request.command_name == "create") {
    request.command = Command::kCreate;
  } else if (request.command_name == "str_replace") {
    request.command = Command::kStrReplace;
  } else if (request.command_name == "insert") {
    request.command = Command::kInsert;
  } else {
    reject_input("Unknown command '" + request.command_name +
                 "'; expected one of view, create, str_replace, insert");
  }

  request.path = require_string(input, "path", request.command_name);
  switch (request.command) {
    case Command::kView:
      request.view_range = parse_view_range(input);
      break;
    case Command::kCreate:
      request.file_text = require_string(input, "file_text", "create");
      break;
    case Command::kStrReplace:
      request.old_str = require_string(input, "old_str", "str_replace");
      request.new_str = require_string(input, "new_str", "str_replace");
      if (request.old_str.empty()) reject_input("Parameter 'old_str' must not be empty");
      break;
    case Command::kInsert:
      request.insert_line = parse_insert_line(input);
      request.insert_text = require_string(input, "insert_text", "insert");
      break;
  }
  return request;
}

// ---------------------------------------------------------------------------------
// Reading.

// Reads a regular file opened with O_NONBLOCK (so a FIFO swapped in could not block
// the open). Refuses files over `limit` bytes and binary files; `purpose` ("view" or
// "edit") words the refusal.
std::string read_text_file(int fd, const struct stat& st, size_t limit, std::string_view purpose,
                           const ResolvedPath& path) {
  auto too_large = [&](uint64_t size) {
    fail("File is too large to " + std::string(purpose) + " (" + std::to_string(size) + " bytes, limit " +
         std::to_string(limit) + "): " + path.sandbox_path);
  };
  if (static_cast<uint64_t>(st.st_size) > limit) too_large(static_cast<uint64_t>(st.st_size));

  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);

  std::string content;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("Cannot read " + path.sandbox_path + ": " + std::strerror(errno));
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > limit) too_large(content.size());  // it grew while we read
  }

  if (looks_binary(content)) {
    fail("File is binary and cannot be " + std::string(purpose == "view" ? "displayed" : "edited") +
         " as text: " + path.sandbox_path);
  }
  return content;
}

// ---------------------------------------------------------------------------------
// view

struct DirectoryEntry {
  std::string name;
  bool is_directory;  // a real directory; a symlink to one is listed as a plain entry
};

// The visible entries of a directory, sorted by name. Hidden names (".x") are left out,
// as the reference editor does.
std::vector<DirectoryEntry> read_directory(int dir_fd) {
  std::vector<DirectoryEntry> entries;
  int copy = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);  // closedir() closes the fd it is given
  if (copy < 0) return entries;
  DIR* dir = ::fdopendir(copy);
  if (dir == nullptr) {
    ::close(copy);
    return entries;
  }
  while (const dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.empty() || name[0] == '.') continue;
    bool is_directory = entry->d_type == DT_DIR;
    if (entry->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_directory =
          ::fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    entries.push_back({std::move(name), is_directory});
  }
  ::closedir(dir);
  std::sort(entries.begin(), entries.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });
  return entries;
}

// Two levels of a directory, one relative path a line, folders ending in "/", each
// folder followed by its own entries. Symlinks are listed, never entered.
std::vector<std::string> list_two_levels(int dir_fd, size_t limit, const ResolvedPath& path) {
  std::vector<std::string> lines;
  size_t bytes = 0;
  auto add = [&](std::string line) {
    bytes += line.size() + 1;
    if (bytes > limit) {
      fail("Directory listing is too large to view (more than " + std::to_string(limit) +
           " bytes): " + path.sandbox_path);
    }
    lines.push_back(std::move(line));
  };

  for (const auto& entry : read_directory(dir_fd)) {
    add(entry.is_directory ? entry.name + "/" : entry.name);
    if (!entry.is_directory) continue;
    // O_NOFOLLOW on a single name below dir_fd: the entry can't be swapped for a way out.
    int sub_fd = open_beneath(dir_fd, entry.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK);
    if (sub_fd < 0) continue;  // unreadable or gone meanwhile: list it without contents
    UniqueFd sub(sub_fd);
    for (const auto& child : read_directory(sub.get())) {
      add(entry.name + "/" + child.name + (child.is_directory ? "/" : ""));
    }
  }
  return lines;
}

// The view_result for `lines`, cut to `range` when given.
json::object view_result(std::string_view file_type, const std::vector<std::string_view>& lines,
                         const std::optional<ViewRange>& range) {
  const auto total = static_cast<int64_t>(lines.size());
  int64_t start = 1;
  int64_t end = total;
  if (range) {
    auto invalid = [&](const std::string& why) {
      reject_input("Invalid view_range [" + std::to_string(range->start) + ", " + std::to_string(range->end) +
                   "]: " + why);
    };
    start = range->start;
    if (start < 1) invalid("the start line must be 1 or more");
    if (start > std::max<int64_t>(total, 1)) {
      invalid("the start line is beyond the last line (" + std::to_string(total) + ")");
    }
    if (range->end == -1) {
      end = total;
    } else if (range->end < start) {
      invalid("the end line must be -1 or not before the start line");
    } else if (range->end > total) {
      invalid("the end line is beyond the last line (" + std::to_string(total) + ")");
    } else {
      end = range->end;
    }
  }

  std::vector<std::string_view> shown;
  for (int64_t line = start; line <= end; ++line) shown.push_back(lines[static_cast<size_t>(line - 1)]);

  json::object result;
  result["type"] = "text_editor_code_execution_view_result";
  result["file_type"] = file_type;
  result["content"] = to_valid_utf8(join_lines(shown));
  result["num_lines"] = static_cast<int64_t>(shown.size());
  result["start_line"] = start;
  result["total_lines"] = total;
  return result;
}

json::object view(int root_fd, const ResolvedPath& path, const std::optional<ViewRange>& range,
                  const EditorOptions& options) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  UniqueFd fd = open_beneath_or_fail(root_fd, path.relative, O_RDONLY | O_NONBLOCK | O_NOCTTY, path);
  struct stat st = stat_or_fail(fd.get(), path);

  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> listing = list_two_levels(fd.get(), options.max_view_bytes, path);
    std::vector<std::string_view> lines(listing.begin(), listing.end());
    return view_result("directory", lines, range);
  }
  if (!S_ISREG(st.st_mode)) fail("Not a regular file: " + path.sandbox_path);

  std::string content = read_text_file(fd.get(), st, options.max_view_bytes, "view", path);
  return view_result("text", split_lines(content), range);
}

// ---------------------------------------------------------------------------------
// Where a write lands.

// A file to write: a name inside a directory that was opened beneath the mount. All
// writes go through `parent`, so nothing that changes in the tree meanwhile (a folder
// swapped for a symlink) can move them outside it.
struct WriteTarget {
  UniqueFd parent;
  std::string name;
  std::optional<struct stat> existing;  // lstat of the name; nullopt: it does not exist
};

std::pair<std::string, std::string> split_parent(const std::string& relative) {
  auto slash = relative.rfind('/');
  if (slash == std::string::npos) return {"", relative};
  return {relative.substr(0, slash), relative.substr(slash + 1)};
}

WriteTarget lookup_write_target(int root_fd, const std::string& relative, const ResolvedPath& path) {
  auto [parent_relative, name] = split_parent(relative);
  WriteTarget target;
  target.parent = open_beneath_or_fail(root_fd, parent_relative, O_PATH | O_DIRECTORY, path);
  target.name = name;
  struct stat st {};
  if (::fstatat(target.parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    target.existing = st;
  } else if (errno != ENOENT) {
    fail_to_open(errno, path);
  }
  return target;
}

// Where a symlink that stays inside the mount leads, as a path relative to the mount.
// The kernel resolves it (beneath the mount only); /proc tells where it arrived.
std::string symlink_destination(int root_fd, const std::string& relative, const ResolvedPath& path) {
  int fd = open_beneath(root_fd, relative, O_PATH);
  if (fd == -ENOENT) fail("Cannot write " + path.sandbox_path + ": it is a symbolic link to a missing file");
  if (fd < 0) fail_to_open(-fd, path);
  UniqueFd destination(fd);
  std::string root = fd_host_path(root_fd);
  std::string file = fd_host_path(destination.get());
  if (root.empty() || file.size() <= root.size() + 1 || file.compare(0, root.size(), root) != 0 ||
      file[root.size()] != '/') {
    fail("Cannot resolve the symbolic link " + path.sandbox_path);
  }
  return file.substr(root.size() + 1);
}

// The file a write to `path` replaces: the path itself, or, when it is a symlink that
// stays inside the mount, the file it points to (as writing through it in the sandbox
// would). A symlink leading out of the mount is refused.
WriteTarget find_write_target(int root_fd, const ResolvedPath& path) {
  if (path.relative.empty()) fail("Is a directory: " + path.sandbox_path);
  WriteTarget target = lookup_write_target(root_fd, path.relative, path);
  if (target.existing && S_ISLNK(target.existing->st_mode)) {
    target = lookup_write_target(root_fd, symlink_destination(root_fd, path.relative, path), path);
    // Resolved to a real file a moment ago: a symlink here again means the tree is changing under us.
    if (target.existing && S_ISLNK(target.existing->st_mode)) {
      fail("Cannot write " + path.sandbox_path + ": it changed while being written");
    }
  }
  if (target.existing && S_ISDIR(target.existing->st_mode)) fail("Is a directory: " + path.sandbox_path);
  if (target.existing && !S_ISREG(target.existing->st_mode)) fail("Not a regular file: " + path.sandbox_path);
  return target;
}

// ---------------------------------------------------------------------------------
// Writing.

struct Ownership {
  uid_t uid;
  gid_t gid;
  mode_t mode;
};

// An existing file keeps its owner and permission bits. Set-id and sticky bits are
// dropped: the server writes as root and must not hand out a privileged file.
Ownership ownership_of(const struct stat& st) {
  return {st.st_uid, st.st_gid, static_cast<mode_t>(st.st_mode & 0777)};
}

// A temporary file's name next to the edited one (O_EXCL guards the rest).
std::string random_suffix() { return random_hex(16); }

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Writes `content` to a new file next to the target, then renames it over the target,
// so code in the sandbox sees either the old file or the new one, never half of one.
void replace_file(const WriteTarget& target, std::string_view content, Ownership owner,
                  const ResolvedPath& path) {
  const int dir = target.parent.get();
  auto cannot_write = [&](int err) { fail("Cannot write " + path.sandbox_path + ": " + std::strerror(err)); };

  std::string temp_name;
  UniqueFd temp;
  for (int attempt = 0; attempt < 16 && temp.get() < 0; ++attempt) {
    temp_name = std::string(kTempPrefix) + random_suffix();
    int fd = ::openat(dir, temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      temp = UniqueFd(fd);
    } else if (errno != EEXIST) {
      cannot_write(errno);
    }
  }
  if (temp.get() < 0) cannot_write(EEXIST);

  // chown before chmod: a chown may clear mode bits, the chmod then sets the final ones.
  bool written = write_all(temp.get(), content) && ::fchown(temp.get(), owner.uid, owner.gid) == 0 &&
                 ::fchmod(temp.get(), owner.mode) == 0 && ::fsync(temp.get()) == 0;
  if (written && ::renameat(dir, temp_name.c_str(), dir, target.name.c_str()) == 0) return;
  int err = errno;
  ::unlinkat(dir, temp_name.c_str(), 0);
  cannot_write(err);
}

// The current text of the file a target names (it must exist).
std::string read_for_edit(const WriteTarget& target, const EditorOptions& options, const ResolvedPath& path) {
  if (!target.existing) fail("File not found: " + path.sandbox_path);
  // O_NOFOLLOW: the name was a regular file a moment ago; if it is a symlink now, refuse.
  int fd = ::openat(target.parent.get(), target.name.c_str(),
                    O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) fail_to_open(errno, path);
  UniqueFd file(fd);
  struct stat st = stat_or_fail(file.get(), path);
  if (!S_ISREG(st.st_mode)) fail("Not a regular file: " + path.sandbox_path);
  return read_text_file(file.get(), st, options.max_view_bytes, "edit", path);
}

// ---------------------------------------------------------------------------------
// create

json::object create(int root_fd, const ResolvedPath& path, const std::string& text,
                    const EditorOptions& options) {
  if (path.relative.empty()) fail("Is a directory: " + path.sandbox_path);
  if (int rc = make_parents_beneath(root_fd, path.relative, options.uid, options.gid); rc < 0) {
    fail_to_open(-rc, path);
  }
  WriteTarget target = find_write_target(root_fd, path);
  const bool is_update = target.existing.has_value();
  // Overwriting keeps the file's owner and mode, as `cat > file` in the sandbox would.
  Ownership owner = is_update ? ownership_of(*target.existing) : Ownership{options.uid, options.gid, 0644};
  replace_file(target, text, owner, path);

  json::object result;
  result["type"] = "text_editor_code_execution_create_result";
  result["is_file_update"] = is_update;
  return result;
}

// ---------------------------------------------------------------------------------
// str_replace and insert

// A change to a file, described as the contract's str_replace_result.
struct LineChange {
  int64_t start = 1;  // 1-based first line of the change, in both the old and new file
  std::vector<std::string_view> removed;
  std::vector<std::string_view> added;
};

json::object change_result(const LineChange& change) {
  json::array lines;
  for (auto line : change.removed) lines.emplace_back(to_valid_utf8("-" + std::string(line)));
  for (auto line : change.added) lines.emplace_back(to_valid_utf8("+" + std::string(line)));
  json::object result;
  result["type"] = "text_editor_code_execution_str_replace_result";
  result["old_start"] = change.start;
  result["old_lines"] = static_cast<int64_t>(change.removed.size());
  result["new_start"] = change.start;
  result["new_lines"] = static_cast<int64_t>(change.added.size());
  result["lines"] = std::move(lines);
  return result;
}

// Positions where `needle` starts in `text`, overlapping ones included: "aa" in "aaa"
// is ambiguous, so it counts twice.
std::vector<size_t> find_all(std::string_view text, std::string_view needle) {
  std::vector<size_t> positions;
  for (size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + 1)) {
    positions.push_back(at);
  }
  return positions;
}

// 0-based line of the byte at `offset`.
size_t line_of(std::string_view text, size_t offset) {
  return static_cast<size_t>(
      std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

// The lines a replacement touched: from the line where the match starts, through the
// line holding its last byte, against what those lines became. Lines after them that
// the replacement left as they were are not part of it; if the new text ran into the
// following line (old_str ending in "\n", new_str not), that line is part of it.
LineChange describe_replacement(const std::vector<std::string_view>& before,
                                const std::vector<std::string_view>& after, size_t first_line,
                                size_t last_line) {
  size_t unchanged_tail = 0;
  const size_t tail_limit =
      std::min(before.size() - (last_line + 1), after.size() - std::min(after.size(), first_line));
  while (unchanged_tail < tail_limit &&
         before[before.size() - 1 - unchanged_tail] == after[after.size() - 1 - unchanged_tail]) {
    ++unchanged_tail;
  }
  LineChange change;
  change.start = static_cast<int64_t>(first_line) + 1;
  change.removed.assign(before.begin() + static_cast<std::ptrdiff_t>(first_line),
                        before.end() - static_cast<std::ptrdiff_t>(unchanged_tail));
  if (after.size() > first_line + unchanged_tail) {
    change.added.assign(after.begin() + static_cast<std::ptrdiff_t>(first_line),
                        after.end() - static_cast<std::ptrdiff_t>(unchanged_tail));
  }
  return change;
}

json::object str_replace(int root_fd, const ResolvedPath& path, const Request& request,
                         const EditorOptions& options) {
  WriteTarget target = find_write_target(root_fd, path);
  const std::string old_text = read_for_edit(target, options, path);

  const auto matches = find_all(old_text, request.old_str);
  if (matches.empty()) fail("No match found for old_str in " + path.sandbox_path);
  if (matches.size() > 1) {
    fail("old_str appears " + std::to_string(matches.size()) + " times in " + path.sandbox_path +
         "; it must be unique");
  }
  const size_t at = matches.front();

  std::string new_text =
      old_text.substr(0, at) + request.new_str + old_text.substr(at + request.old_str.size());
  // A file that ended with a newline keeps it, even if old_str took the last one.
  if (ends_with_newline(old_text) && !new_text.empty() && !ends_with_newline(new_text)) new_text += '\n';

  const auto before = split_lines(old_text);
  const auto after = split_lines(new_text);
  LineChange change = describe_replacement(before, after, line_of(old_text, at),
                                           line_of(old_text, at + request.old_str.size() - 1));
  json::object result = change_result(change);
  replace_file(target, new_text, ownership_of(*target.existing), path);
  return result;
}

json::object insert(int root_fd, const ResolvedPath& path, const Request& request,
                    const EditorOptions& options) {
  WriteTarget target = find_write_target(root_fd, path);
  const std::string old_text = read_for_edit(target, options, path);

  auto lines = split_lines(old_text);
  if (request.insert_line > static_cast<int64_t>(lines.size())) {
    reject_input("Invalid insert_line " + std::to_string(request.insert_line) + ": the file has " +
                 std::to_string(lines.size()) + " lines");
  }
  const auto inserted = split_lines(request.insert_text);
  lines.insert(lines.begin() + request.insert_line, inserted.begin(), inserted.end());

  // The file keeps its trailing newline, or lack of one; an empty file takes the
  // inserted text's.
  const bool trailing_newline =
      old_text.empty() ? ends_with_newline(request.insert_text) : ends_with_newline(old_text);
  std::string new_text = join_lines(lines);
  if (trailing_newline && !new_text.empty()) new_text += '\n';

  LineChange change;
  change.start = request.insert_line + 1;
  change.added = inserted;
  json::object result = change_result(change);
  replace_file(target, new_text, ownership_of(*target.existing), path);
  return result;
}

// ---------------------------------------------------------------------------------

ResolvedPath resolve_or_fail(const ContainerPaths& paths, const Request& request) {
  auto resolved = resolve_sandbox_path(paths, request.path);
  if (!resolved) fail("Path '" + request.path + "' does not match any session mount");
  if (request.writes() && resolved->read_only) fail("Path '" + request.path + "' is in a read-only mount");
  return *resolved;
}

json::object run(const ContainerPaths& paths, const json::object& input, const EditorOptions& options) {
  const Request request = parse_request(input);
  const ResolvedPath path = resolve_or_fail(paths, request);
  UniqueFd root = open_mount_root(path);
  switch (request.command) {
    case Command::kView:
      return view(root.get(), path, request.view_range, options);
    case Command::kCreate:
      return create(root.get(), path, request.file_text, options);
    case Command::kStrReplace:
      return str_replace(root.get(), path, request, options);
    case Command::kInsert:
      return insert(root.get(), path, request, options);
  }
  fail("Unknown command");
}

}  // namespace

json::object run_text_editor(const ContainerPaths& paths, const json::object& input,
                             const EditorOptions& options) {
  try {
    return run(paths, input, options);
  } catch (const EditorError& error) {
    return error_block(error.code(), error.what(), options.include_detail);
  } catch (const std::exception& error) {  // std::bad_alloc and the like
    return error_block(kUnavailable, std::string("Internal error: ") + error.what(), options.include_detail);
  }
}

}  // namespace sandboxd::tools
