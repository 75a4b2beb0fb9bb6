// text_editor_code_execution on real files: each mount is a folder of a fresh mkdtemp
// directory, and the host around it is the real one (so the symlink tests really point
// at / and /etc). Runs as root, like the server.

#include "tools/text_editor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using sandboxd::ContainerPaths;
using sandboxd::tools::EditorOptions;
using sandboxd::tools::run_text_editor;

constexpr const char* kErrorType = "text_editor_code_execution_tool_result_error";
constexpr const char* kViewType = "text_editor_code_execution_view_result";
constexpr const char* kCreateType = "text_editor_code_execution_create_result";
constexpr const char* kChangeType = "text_editor_code_execution_str_replace_result";

// The contract's example file: four lines.
constexpr const char* kSettings = "{\n  \"setting\": \"value\",\n  \"debug\": true\n}";

std::string text(const json::value& value) { return std::string(value.as_string()); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

void write_file(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

std::vector<std::string> lines_of(const json::object& result) {
  std::vector<std::string> lines;
  for (const auto& line : result.at("lines").as_array()) lines.push_back(text(line));
  return lines;
}

class TextEditorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/text_editor_test.XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    root_ = name;
    paths_.workspace = root_ + "/workspace";
    paths_.uploads = root_ + "/uploads";
    paths_.outputs = root_ + "/outputs";
    paths_.skills = root_ + "/skills";
    for (const auto* dir : {&paths_.workspace, &paths_.uploads, &paths_.outputs, &paths_.skills}) {
      fs::create_directory(*dir);
    }
  }
  void TearDown() override { fs::remove_all(root_); }  // does not follow symlinks

  json::object run(const json::object& input) { return run_text_editor(paths_, input, options_); }

  json::object view(const std::string& path) { return run({{"command", "view"}, {"path", path}}); }
  json::object view(const std::string& path, int64_t start, int64_t end) {
    return run({{"command", "view"}, {"path", path}, {"view_range", json::array{start, end}}});
  }
  json::object create(const std::string& path, const std::string& file_text) {
    return run({{"command", "create"}, {"path", path}, {"file_text", file_text}});
  }
  json::object replace(const std::string& path, const std::string& old_str, const std::string& new_str) {
    return run({{"command", "str_replace"}, {"path", path}, {"old_str", old_str}, {"new_str", new_str}});
  }
  json::object insert(const std::string& path, int64_t line, const std::string& insert_text) {
    return run({{"command", "insert"}, {"path", path}, {"insert_line", line}, {"insert_text", insert_text}});
  }

  // Host path of a workspace file.
  std::string ws(const std::string& relative) const { return paths_.workspace + "/" + relative; }

  std::string root_;
  ContainerPaths paths_;
  EditorOptions options_;
};

void expect_error(const json::object& result, const std::string& explanation,
                  const std::string& code = "unavailable") {
  ASSERT_EQ(text(result.at("type")), kErrorType) << json::serialize(result);
  EXPECT_EQ(text(result.at("error_code")), code);
  const auto& detail = result.at("detail").as_object();
  EXPECT_EQ(text(detail.at("code")), code);
  EXPECT_EQ(text(detail.at("explanation")), explanation);
}

void expect_invalid_input(const json::object& result, const std::string& explanation) {
  expect_error(result, explanation, "invalid_tool_input");
}

void expect_view(const json::object& result, const std::string& content, int64_t num_lines,
                 int64_t start_line, int64_t total_lines, const std::string& file_type = "text") {
  ASSERT_EQ(text(result.at("type")), kViewType) << json::serialize(result);
  EXPECT_EQ(text(result.at("file_type")), file_type);
  EXPECT_EQ(text(result.at("content")), content);
  EXPECT_EQ(result.at("num_lines").as_int64(), num_lines);
  EXPECT_EQ(result.at("start_line").as_int64(), start_line);
  EXPECT_EQ(result.at("total_lines").as_int64(), total_lines);
}

// ----- view -----------------------------------------------------------------------

TEST_F(TextEditorTest, ViewSeedExample) {
  write_file(ws("settings.json"), kSettings);
  expect_view(view("/home/agent/workspace/settings.json"), kSettings, 4, 1, 4);
}

TEST_F(TextEditorTest, ViewFinalNewlineIsNotAnExtraLine) {
  write_file(ws("settings.json"), std::string(kSettings) + "\n");
  expect_view(view("settings.json"), kSettings, 4, 1, 4);
  write_file(ws("ab.txt"), "a\nb\n");
  expect_view(view("ab.txt"), "a\nb", 2, 1, 2);
  write_file(ws("blank_end.txt"), "a\n\n");
  expect_view(view("blank_end.txt"), "a\n", 2, 1, 2);
}

TEST_F(TextEditorTest, ViewEmptyFile) {
  write_file(ws("empty.txt"), "");
  expect_view(view("empty.txt"), "", 0, 1, 0);
  expect_view(view("empty.txt", 1, -1), "", 0, 1, 0);
}

TEST_F(TextEditorTest, ViewRange) {
  write_file(ws("five.txt"), "one\ntwo\nthree\nfour\nfive\n");
  expect_view(view("five.txt", 2, 4), "two\nthree\nfour", 3, 2, 5);
  expect_view(view("five.txt", 3, -1), "three\nfour\nfive", 3, 3, 5);
  expect_view(view("five.txt", 1, -1), "one\ntwo\nthree\nfour\nfive", 5, 1, 5);
  expect_view(view("five.txt", 5, 5), "five", 1, 5, 5);
  expect_view(view("five.txt", 5, -1), "five", 1, 5, 5);
}

TEST_F(TextEditorTest, ViewRangeOutOfBoundsIsInvalidInput) {
  write_file(ws("five.txt"), "one\ntwo\nthree\nfour\nfive\n");
  expect_invalid_input(view("five.txt", 0, 2), "Invalid view_range [0, 2]: the start line must be 1 or more");
  expect_invalid_input(view("five.txt", 6, -1),
                       "Invalid view_range [6, -1]: the start line is beyond the last line (5)");
  expect_invalid_input(view("five.txt", 4, 3),
                       "Invalid view_range [4, 3]: the end line must be -1 or not before the start line");
  expect_invalid_input(view("five.txt", 2, -2),
                       "Invalid view_range [2, -2]: the end line must be -1 or not before the start line");
  expect_invalid_input(view("five.txt", 2, 9),
                       "Invalid view_range [2, 9]: the end line is beyond the last line (5)");
}

TEST_F(TextEditorTest, ViewRangeOfWrongShapeIsInvalidInput) {
  write_file(ws("five.txt"), "one\n");
  const std::string shape = "Parameter 'view_range' must be an array of two integers [start, end]";
  expect_invalid_input(run({{"command", "view"}, {"path", "five.txt"}, {"view_range", json::array{1}}}),
                       shape);
  expect_invalid_input(run({{"command", "view"}, {"path", "five.txt"}, {"view_range", json::array{1, 2, 3}}}),
                       shape);
  expect_invalid_input(run({{"command", "view"}, {"path", "five.txt"}, {"view_range", json::array{"1", 2}}}),
                       shape);
  expect_invalid_input(run({{"command", "view"}, {"path", "five.txt"}, {"view_range", json::array{1.5, 2}}}),
                       shape);
  expect_invalid_input(run({{"command", "view"}, {"path", "five.txt"}, {"view_range", "1-2"}}), shape);
  // null counts as absent
  expect_view(run({{"command", "view"}, {"path", "five.txt"}, {"view_range", nullptr}}), "one", 1, 1, 1);
}

TEST_F(TextEditorTest, ViewMissingFile) {
  expect_error(view("/home/agent/workspace/missing.txt"),
               "File not found: /home/agent/workspace/missing.txt");
  expect_error(view("missing.txt"), "File not found: /home/agent/workspace/missing.txt");
  write_file(ws("file.txt"), "x");
  expect_error(view("file.txt/below"), "File not found: /home/agent/workspace/file.txt/below");
}

TEST_F(TextEditorTest, ViewDirectoryListsTwoLevelsWithoutHiddenEntries) {
  write_file(ws("b/c.txt"), "c");
  write_file(ws("b/d/e.txt"), "too deep");
  write_file(ws("b/.secret"), "hidden");
  write_file(ws("a.txt"), "a");
  write_file(ws(".hidden/x"), "hidden");
  fs::create_directory(ws("z"));
  fs::create_symlink("/etc", ws("b/etc_link"));
  const std::string listing = "a.txt\nb/\nb/c.txt\nb/d/\nb/etc_link\nz/";
  expect_view(view("/home/agent/workspace"), listing, 6, 1, 6, "directory");
  expect_view(view("."), listing, 6, 1, 6, "directory");
  expect_view(view("b"), "c.txt\nd/\nd/e.txt\netc_link", 4, 1, 4, "directory");
  expect_view(view("/home/agent/workspace/", 2, 3), "b/\nb/c.txt", 2, 2, 6, "directory");
  expect_view(view("z"), "", 0, 1, 0, "directory");
}

TEST_F(TextEditorTest, ViewOfUploadsAndSkillsIsAllowed) {
  write_file(paths_.uploads + "/data/sales.csv", "month,revenue\njan,10\n");
  write_file(paths_.skills + "/pdf/SKILL.md", "# PDF\n");
  expect_view(view("/mnt/user-data/uploads/data/sales.csv"), "month,revenue\njan,10", 2, 1, 2);
  expect_view(view("/mnt/skills/pdf/SKILL.md"), "# PDF", 1, 1, 1);
  expect_view(view("/mnt/skills"), "pdf/\npdf/SKILL.md", 2, 1, 2, "directory");
}

TEST_F(TextEditorTest, ViewUtf8Text) {
  write_file(ws("accents.txt"), "caf\xC3\xA9\n\xF0\x9F\x98\x80 ok\n");
  expect_view(view("accents.txt"), "caf\xC3\xA9\n\xF0\x9F\x98\x80 ok", 2, 1, 2);
}

TEST_F(TextEditorTest, ViewRefusesBinaryFiles) {
  write_file(ws("nul.bin"), std::string("ab\0cd", 5));
  expect_error(view("nul.bin"),
               "File is binary and cannot be displayed as text: /home/agent/workspace/nul.bin");
  write_file(ws("latin1.txt"), "caf\xE9\n");
  expect_error(view("latin1.txt"),
               "File is binary and cannot be displayed as text: /home/agent/workspace/latin1.txt");
  write_file(ws("image.png"), "\x89PNG\r\n\x1a\n");
  expect_error(view("image.png"),
               "File is binary and cannot be displayed as text: /home/agent/workspace/image.png");
}

TEST_F(TextEditorTest, ViewJudgesBinaryOnTheFirst8KiB) {
  // A stray byte past the first 8 KiB does not make a text file binary; it shows as U+FFFD.
  std::string content(9000, 'a');
  content[8500] = '\xFF';
  write_file(ws("log.txt"), content);
  auto result = view("log.txt");
  ASSERT_EQ(text(result.at("type")), kViewType);
  std::string expected = content;
  expected.replace(8500, 1, "\xEF\xBF\xBD");
  EXPECT_EQ(text(result.at("content")), expected);

  // A character cut in two by the 8 KiB boundary is still text.
  std::string split(8191, 'a');
  split += "\xC3\xA9";
  write_file(ws("boundary.txt"), split);
  expect_view(view("boundary.txt"), split, 1, 1, 1);
}

TEST_F(TextEditorTest, ViewRefusesFilesOverTheSizeLimit) {
  options_.max_view_bytes = 10;
  write_file(ws("ten.txt"), "0123456789");
  expect_view(view("ten.txt"), "0123456789", 1, 1, 1);
  write_file(ws("eleven.txt"), "0123456789A");
  expect_error(view("eleven.txt"),
               "File is too large to view (11 bytes, limit 10): /home/agent/workspace/eleven.txt");
  expect_error(replace("eleven.txt", "A", "B"),
               "File is too large to edit (11 bytes, limit 10): /home/agent/workspace/eleven.txt");
  EXPECT_EQ(read_file(ws("eleven.txt")), "0123456789A");
}

TEST_F(TextEditorTest, ViewOfAFifoFailsWithoutBlocking) {
  ASSERT_EQ(::mkfifo(ws("pipe").c_str(), 0644), 0);
  expect_error(view("pipe"), "Not a regular file: /home/agent/workspace/pipe");
  expect_error(create("pipe", "x"), "Not a regular file: /home/agent/workspace/pipe");
  expect_error(replace("pipe", "a", "b"), "Not a regular file: /home/agent/workspace/pipe");
  expect_error(insert("pipe", 0, "x"), "Not a regular file: /home/agent/workspace/pipe");
  EXPECT_TRUE(S_ISFIFO(stat_of(ws("pipe")).st_mode));
}

TEST_F(TextEditorTest, DeviceNodesAreRefused) {
  ASSERT_EQ(::mknod(ws("null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  // Depending on the host's mount options opening it is refused (nodev) or it opens
  // and is found not to be a regular file: either way, an error and no content.
  auto viewed = view("null");
  ASSERT_EQ(text(viewed.at("type")), kErrorType);
  EXPECT_NE(text(viewed.at("detail").at("explanation")).find("/home/agent/workspace/null"),
            std::string::npos);
  expect_error(create("null", "x"), "Not a regular file: /home/agent/workspace/null");
  expect_error(replace("null", "a", "b"), "Not a regular file: /home/agent/workspace/null");
  EXPECT_TRUE(S_ISCHR(stat_of(ws("null")).st_mode));
}

// ----- paths and mounts ----------------------------------------------------------------

TEST_F(TextEditorTest, PathOutsideTheMounts) {
  expect_error(view("/etc/passwd"), "Path '/etc/passwd' does not match any session mount");
  expect_error(create("/tmp/x.txt", "x"), "Path '/tmp/x.txt' does not match any session mount");
  expect_error(view("../notes.txt"), "Path '../notes.txt' does not match any session mount");
  expect_error(view("/home/agent/workspace/../../../etc/passwd"),
               "Path '/home/agent/workspace/../../../etc/passwd' does not match any session mount");
  expect_error(view("/mnt/user-data"), "Path '/mnt/user-data' does not match any session mount");
}

TEST_F(TextEditorTest, NoSkillsMountConfigured) {
  paths_.skills.clear();
  expect_error(view("/mnt/skills/x"), "Path '/mnt/skills/x' does not match any session mount");
}

TEST_F(TextEditorTest, RelativePathsResolveAgainstTheWorkspace) {
  auto created = create("notes/todo.txt", "buy milk\n");
  ASSERT_EQ(text(created.at("type")), kCreateType) << json::serialize(created);
  EXPECT_EQ(read_file(ws("notes/todo.txt")), "buy milk\n");
  expect_view(view("/home/agent/workspace/notes/todo.txt"), "buy milk", 1, 1, 1);
  expect_view(view("./notes/../notes//todo.txt"), "buy milk", 1, 1, 1);
}

TEST_F(TextEditorTest, WritesToReadOnlyMountsAreRefused) {
  write_file(paths_.uploads + "/x", "upload\n");
  write_file(paths_.skills + "/s/SKILL.md", "skill\n");
  expect_error(create("/mnt/user-data/uploads/x", "y"),
               "Path '/mnt/user-data/uploads/x' is in a read-only mount");
  expect_error(create("/mnt/user-data/uploads/new", "y"),
               "Path '/mnt/user-data/uploads/new' is in a read-only mount");
  expect_error(replace("/mnt/user-data/uploads/x", "upload", "y"),
               "Path '/mnt/user-data/uploads/x' is in a read-only mount");
  expect_error(insert("/mnt/skills/s/SKILL.md", 0, "y"),
               "Path '/mnt/skills/s/SKILL.md' is in a read-only mount");
  expect_error(create("/mnt/skills/s/new.md", "y"), "Path '/mnt/skills/s/new.md' is in a read-only mount");
  EXPECT_EQ(read_file(paths_.uploads + "/x"), "upload\n");
  EXPECT_EQ(read_file(paths_.skills + "/s/SKILL.md"), "skill\n");
  EXPECT_FALSE(fs::exists(paths_.uploads + "/new"));
  EXPECT_FALSE(fs::exists(paths_.skills + "/s/new.md"));
}

TEST_F(TextEditorTest, DotDotClimbsLexicallyIntoAnotherMount) {
  write_file(paths_.uploads + "/x", "uploaded\n");
  const std::string into_uploads = "../../../mnt/user-data/uploads/x";
  expect_view(view(into_uploads), "uploaded", 1, 1, 1);
  expect_error(create(into_uploads, "overwritten"), "Path '" + into_uploads + "' is in a read-only mount");
  expect_error(replace(into_uploads, "uploaded", "changed"),
               "Path '" + into_uploads + "' is in a read-only mount");
  EXPECT_EQ(read_file(paths_.uploads + "/x"), "uploaded\n");

  auto created = create("../../../mnt/user-data/outputs/report.md", "# Report\n");
  ASSERT_EQ(text(created.at("type")), kCreateType) << json::serialize(created);
  EXPECT_EQ(read_file(paths_.outputs + "/report.md"), "# Report\n");
  EXPECT_FALSE(fs::exists(ws("report.md")));
}

// ----- create --------------------------------------------------------------------------

TEST_F(TextEditorTest, CreateNewFile) {
  auto result = create("/home/agent/workspace/hello.py", "print('hi')\n");
  ASSERT_EQ(text(result.at("type")), kCreateType) << json::serialize(result);
  EXPECT_FALSE(result.at("is_file_update").as_bool());
  EXPECT_EQ(result.size(), 2u);
  EXPECT_EQ(read_file(ws("hello.py")), "print('hi')\n");
}

TEST_F(TextEditorTest, CreateOverExistingFileIsAnUpdate) {
  create("hello.py", "print('hi')\n");
  auto result = create("hello.py", "print('bye')\n");
  ASSERT_EQ(text(result.at("type")), kCreateType) << json::serialize(result);
  EXPECT_TRUE(result.at("is_file_update").as_bool());
  EXPECT_EQ(read_file(ws("hello.py")), "print('bye')\n");
}

TEST_F(TextEditorTest, CreateEmptyFile) {
  auto result = create("empty.txt", "");
  ASSERT_EQ(text(result.at("type")), kCreateType) << json::serialize(result);
  EXPECT_TRUE(fs::exists(ws("empty.txt")));
  EXPECT_EQ(fs::file_size(ws("empty.txt")), 0u);
}

TEST_F(TextEditorTest, CreatedFilesAndFoldersBelongToTheAgent) {
  options_.uid = 4242;
  options_.gid = 4343;
  auto result = create("deep/er/new.txt", "content\n");
  ASSERT_EQ(text(result.at("type")), kCreateType) << json::serialize(result);
  struct stat file = stat_of(ws("deep/er/new.txt"));
  EXPECT_EQ(file.st_uid, 4242u);
  EXPECT_EQ(file.st_gid, 4343u);
  EXPECT_EQ(file.st_mode & 07777, 0644u);
  EXPECT_TRUE(S_ISREG(file.st_mode));
  for (const auto* dir : {"deep", "deep/er"}) {
    struct stat st = stat_of(ws(dir));
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << dir;
    EXPECT_EQ(st.st_uid, 4242u) << dir;
    EXPECT_EQ(st.st_gid, 4343u) << dir;
  }
}

TEST_F(TextEditorTest, OverwritingKeepsOwnerAndMode) {
  write_file(ws("run.sh"), "#!/bin/sh\necho old\n");
  ASSERT_EQ(::chown(ws("run.sh").c_str(), 555, 556), 0);
  ASSERT_EQ(::chmod(ws("run.sh").c_str(), 0750), 0);
  auto result = create("run.sh", "#!/bin/sh\necho new\n");
  ASSERT_EQ(text(result.at("type")), kCreateType) << json::serialize(result);
  struct stat st = stat_of(ws("run.sh"));
  EXPECT_EQ(st.st_uid, 555u);
  EXPECT_EQ(st.st_gid, 556u);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
}

TEST_F(TextEditorTest, CreateReplacesTheFileAtomically) {
  write_file(ws("data.txt"), "old\n");
  ino_t before = stat_of(ws("data.txt")).st_ino;
  std::ifstream reader(ws("data.txt"));  // someone reading the old file meanwhile
  create("data.txt", "new\n");
  EXPECT_NE(stat_of(ws("data.txt")).st_ino, before);  // a new inode was renamed in
  std::string old_content;
  std::getline(reader, old_content);
  EXPECT_EQ(old_content, "old");  // the reader still sees the whole old file
  // and no temporary file is left behind
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(paths_.workspace)) names.push_back(entry.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"data.txt"});
}

TEST_F(TextEditorTest, CreateOverADirectoryFails) {
  fs::create_directory(ws("folder"));
  expect_error(create("folder", "x"), "Is a directory: /home/agent/workspace/folder");
  expect_error(create("/home/agent/workspace", "x"), "Is a directory: /home/agent/workspace");
  EXPECT_TRUE(fs::is_directory(ws("folder")));
}

TEST_F(TextEditorTest, CreateBelowAFileFails) {
  write_file(ws("file.txt"), "x");
  expect_error(create("file.txt/child.txt", "y"), "File not found: /home/agent/workspace/file.txt/child.txt");
  EXPECT_EQ(read_file(ws("file.txt")), "x");
}

// ----- str_replace ---------------------------------------------------------------------

TEST_F(TextEditorTest, StrReplaceSeedExample) {
  write_file(ws("settings.json"), std::string(kSettings) + "\n");
  auto result = replace("/home/agent/workspace/settings.json", "\"debug\": true", "\"debug\": false");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(result.at("old_start").as_int64(), 3);
  EXPECT_EQ(result.at("old_lines").as_int64(), 1);
  EXPECT_EQ(result.at("new_start").as_int64(), 3);
  EXPECT_EQ(result.at("new_lines").as_int64(), 1);
  EXPECT_EQ(lines_of(result), (std::vector<std::string>{"-  \"debug\": true", "+  \"debug\": false"}));
  EXPECT_EQ(read_file(ws("settings.json")), "{\n  \"setting\": \"value\",\n  \"debug\": false\n}\n");
}

TEST_F(TextEditorTest, StrReplaceAcrossLines) {
  write_file(ws("f.py"), "a = 1\nb = 2\nc = 3\nd = 4\n");
  auto result = replace("f.py", "b = 2\nc = 3", "b = 20\nx = 0\nc = 30");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(result.at("old_start").as_int64(), 2);
  EXPECT_EQ(result.at("old_lines").as_int64(), 2);
  EXPECT_EQ(result.at("new_start").as_int64(), 2);
  EXPECT_EQ(result.at("new_lines").as_int64(), 3);
  EXPECT_EQ(lines_of(result), (std::vector<std::string>{"-b = 2", "-c = 3", "+b = 20", "+x = 0", "+c = 30"}));
  EXPECT_EQ(read_file(ws("f.py")), "a = 1\nb = 20\nx = 0\nc = 30\nd = 4\n");
}

TEST_F(TextEditorTest, StrReplaceWithEmptyNewStrDeletes) {
  write_file(ws("f.txt"), "keep\ndrop me\nkeep too\n");
  auto result = replace("f.txt", "drop me\n", "");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(result.at("old_start").as_int64(), 2);
  EXPECT_EQ(result.at("old_lines").as_int64(), 1);
  EXPECT_EQ(result.at("new_lines").as_int64(), 0);
  EXPECT_EQ(lines_of(result), (std::vector<std::string>{"-drop me"}));
  EXPECT_EQ(read_file(ws("f.txt")), "keep\nkeep too\n");
}

TEST_F(TextEditorTest, StrReplaceThatJoinsLinesShowsTheJoinedLine) {
  write_file(ws("f.txt"), "a\nb\nc\n");
  auto result = replace("f.txt", "a\n", "x");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(result.at("old_start").as_int64(), 1);
  EXPECT_EQ(lines_of(result), (std::vector<std::string>{"-a", "-b", "+xb"}));
  EXPECT_EQ(read_file(ws("f.txt")), "xb\nc\n");
}

TEST_F(TextEditorTest, StrReplaceKeepsTheTrailingNewline) {
  write_file(ws("f.txt"), "one\ntwo\n");
  replace("f.txt", "two\n", "2");
  EXPECT_EQ(read_file(ws("f.txt")), "one\n2\n");
  // and does not add one to a file without it
  write_file(ws("g.txt"), "one\ntwo");
  replace("g.txt", "two", "2");
  EXPECT_EQ(read_file(ws("g.txt")), "one\n2");
}

TEST_F(TextEditorTest, StrReplaceNoMatch) {
  write_file(ws("f.txt"), "hello\n");
  expect_error(replace("f.txt", "absent", "x"), "No match found for old_str in /home/agent/workspace/f.txt");
  EXPECT_EQ(read_file(ws("f.txt")), "hello\n");
}

TEST_F(TextEditorTest, StrReplaceMustBeUnique) {
  write_file(ws("f.txt"), "x = 1\ny = 1\nz = 1\n");
  expect_error(replace("f.txt", " = 1", " = 2"),
               "old_str appears 3 times in /home/agent/workspace/f.txt; it must be unique");
  // overlapping matches are ambiguous too
  write_file(ws("g.txt"), "aaa\n");
  expect_error(replace("g.txt", "aa", "b"),
               "old_str appears 2 times in /home/agent/workspace/g.txt; it must be unique");
  EXPECT_EQ(read_file(ws("f.txt")), "x = 1\ny = 1\nz = 1\n");
}

TEST_F(TextEditorTest, StrReplaceMissingFile) {
  expect_error(replace("nope.txt", "a", "b"), "File not found: /home/agent/workspace/nope.txt");
  EXPECT_FALSE(fs::exists(ws("nope.txt")));
}

TEST_F(TextEditorTest, StrReplaceOnADirectory) {
  fs::create_directory(ws("folder"));
  expect_error(replace("folder", "a", "b"), "Is a directory: /home/agent/workspace/folder");
}

TEST_F(TextEditorTest, StrReplaceRefusesBinaryFiles) {
  write_file(ws("nul.bin"), std::string("ab\0cd", 5));
  expect_error(replace("nul.bin", "ab", "xy"),
               "File is binary and cannot be edited as text: /home/agent/workspace/nul.bin");
  EXPECT_EQ(read_file(ws("nul.bin")), std::string("ab\0cd", 5));
}

TEST_F(TextEditorTest, EditsKeepOwnerAndMode) {
  write_file(ws("tool.sh"), "echo a\n");
  ASSERT_EQ(::chown(ws("tool.sh").c_str(), 777, 778), 0);
  ASSERT_EQ(::chmod(ws("tool.sh").c_str(), 0755), 0);
  replace("tool.sh", "echo a", "echo b");
  insert("tool.sh", 0, "#!/bin/sh");
  EXPECT_EQ(read_file(ws("tool.sh")), "#!/bin/sh\necho b\n");
  struct stat st = stat_of(ws("tool.sh"));
  EXPECT_EQ(st.st_uid, 777u);
  EXPECT_EQ(st.st_gid, 778u);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST_F(TextEditorTest, EditsInOutputs) {
  write_file(paths_.outputs + "/r.md", "draft\n");
  auto result = replace("/mnt/user-data/outputs/r.md", "draft", "final");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(read_file(paths_.outputs + "/r.md"), "final\n");
}

// ----- insert --------------------------------------------------------------------------

TEST_F(TextEditorTest, InsertAtTheStart) {
  write_file(ws("f.txt"), "b\nc\n");
  auto result = insert("f.txt", 0, "a");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(result.at("old_start").as_int64(), 1);
  EXPECT_EQ(result.at("old_lines").as_int64(), 0);
  EXPECT_EQ(result.at("new_start").as_int64(), 1);
  EXPECT_EQ(result.at("new_lines").as_int64(), 1);
  EXPECT_EQ(lines_of(result), std::vector<std::string>{"+a"});
  EXPECT_EQ(read_file(ws("f.txt")), "a\nb\nc\n");
}

TEST_F(TextEditorTest, InsertAtTheEnd) {
  write_file(ws("f.txt"), "a\nb\n");
  auto result = insert("f.txt", 2, "c\nd\n");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(result.at("old_start").as_int64(), 3);
  EXPECT_EQ(result.at("old_lines").as_int64(), 0);
  EXPECT_EQ(result.at("new_start").as_int64(), 3);
  EXPECT_EQ(result.at("new_lines").as_int64(), 2);
  EXPECT_EQ(lines_of(result), (std::vector<std::string>{"+c", "+d"}));
  EXPECT_EQ(read_file(ws("f.txt")), "a\nb\nc\nd\n");
}

TEST_F(TextEditorTest, InsertInTheMiddleOfAFileWithoutFinalNewline) {
  write_file(ws("f.txt"), "a\nc");
  auto result = insert("f.txt", 1, "b");
  EXPECT_EQ(result.at("old_start").as_int64(), 2);
  EXPECT_EQ(read_file(ws("f.txt")), "a\nb\nc");
  insert("f.txt", 3, "d");
  EXPECT_EQ(read_file(ws("f.txt")), "a\nb\nc\nd");
}

TEST_F(TextEditorTest, InsertIntoAnEmptyFile) {
  write_file(ws("empty.txt"), "");
  auto result = insert("empty.txt", 0, "first\n");
  ASSERT_EQ(text(result.at("type")), kChangeType) << json::serialize(result);
  EXPECT_EQ(lines_of(result), std::vector<std::string>{"+first"});
  EXPECT_EQ(read_file(ws("empty.txt")), "first\n");
}

TEST_F(TextEditorTest, InsertLineOutOfRange) {
  write_file(ws("f.txt"), "a\nb\n");
  expect_invalid_input(insert("f.txt", 3, "x"), "Invalid insert_line 3: the file has 2 lines");
  expect_invalid_input(insert("f.txt", -1, "x"), "Parameter 'insert_line' must be 0 or more, got -1");
  EXPECT_EQ(read_file(ws("f.txt")), "a\nb\n");
}

TEST_F(TextEditorTest, InsertMissingFile) {
  expect_error(insert("nope.txt", 0, "x"), "File not found: /home/agent/workspace/nope.txt");
  EXPECT_FALSE(fs::exists(ws("nope.txt")));
}

// ----- malformed input ---------------------------------------------------------------

TEST_F(TextEditorTest, MalformedInput) {
  expect_invalid_input(run({{"path", "f.txt"}}), "Missing required parameter 'command'");
  expect_invalid_input(run({{"command", 3}, {"path", "f.txt"}}), "Parameter 'command' must be a string");
  expect_invalid_input(run({{"command", "delete"}, {"path", "f.txt"}}),
                       "Unknown command 'delete'; expected one of view, create, str_replace, insert");
  expect_invalid_input(run({{"command", "view"}}), "Missing required parameter 'path' for command 'view'");
  expect_invalid_input(run({{"command", "view"}, {"path", 42}}), "Parameter 'path' must be a string");
  expect_invalid_input(run({{"command", "create"}, {"path", "f.txt"}}),
                       "Missing required parameter 'file_text' for command 'create'");
  expect_invalid_input(run({{"command", "create"}, {"path", "f.txt"}, {"file_text", json::array{}}}),
                       "Parameter 'file_text' must be a string");
  expect_invalid_input(run({{"command", "str_replace"}, {"path", "f.txt"}, {"new_str", "x"}}),
                       "Missing required parameter 'old_str' for command 'str_replace'");
  expect_invalid_input(run({{"command", "str_replace"}, {"path", "f.txt"}, {"old_str", "x"}}),
                       "Missing required parameter 'new_str' for command 'str_replace'");
  expect_invalid_input(replace("f.txt", "", "x"), "Parameter 'old_str' must not be empty");
  expect_invalid_input(run({{"command", "insert"}, {"path", "f.txt"}, {"insert_text", "x"}}),
                       "Missing required parameter 'insert_line' for command 'insert'");
  expect_invalid_input(
      run({{"command", "insert"}, {"path", "f.txt"}, {"insert_line", "1"}, {"insert_text", "x"}}),
      "Parameter 'insert_line' must be an integer");
  expect_invalid_input(
      run({{"command", "insert"}, {"path", "f.txt"}, {"insert_line", 1.0}, {"insert_text", "x"}}),
      "Parameter 'insert_line' must be an integer");
  expect_invalid_input(run({{"command", "insert"}, {"path", "f.txt"}, {"insert_line", 0}}),
                       "Missing required parameter 'insert_text' for command 'insert'");
  EXPECT_FALSE(fs::exists(ws("f.txt")));
}

TEST_F(TextEditorTest, WithoutDetailTheErrorHasNoExplanation) {
  options_.include_detail = false;
  auto missing = view("missing.txt");
  // Anthropic's own field for the reason stays; only the Zylon `detail` goes.
  EXPECT_EQ(missing, (json::object{{"type", kErrorType},
                                   {"error_code", "unavailable"},
                                   {"error_message", "File not found: /home/agent/workspace/missing.txt"}}));
  auto malformed = run({{"command", "view"}});
  EXPECT_FALSE(malformed.contains("detail"));
  EXPECT_EQ(malformed.at("error_code"), "invalid_tool_input");
  EXPECT_TRUE(malformed.at("error_message").is_string());
  // successes are unchanged
  write_file(ws("f.txt"), "x\n");
  expect_view(view("f.txt"), "x", 1, 1, 1);
}

// ----- symlinks made by code in the sandbox ---------------------------------------------
//
// Views go through links to the real "/", "/etc" and "/etc/passwd". Writes through them
// are chosen so that even a broken editor would change nothing there (the same bytes,
// an old_str that cannot match, a new name TearDown removes); writes that would be
// destructive aim at a decoy host folder outside the mounts, which exercises the same
// refusal (an absolute symlink out of the mount).

class TextEditorSymlinkTest : public TextEditorTest {
 protected:
  void SetUp() override {
    TextEditorTest::SetUp();
    decoy_dir_ = root_ + "/host";
    write_file(decoy_dir_ + "/secret.txt", kDecoy);
    fs::create_symlink("/", ws("root_link"));
    fs::create_symlink("/etc/passwd", ws("passwd_link"));
    fs::create_symlink("/etc", ws("etc_link"));
    fs::create_symlink(decoy_dir_ + "/secret.txt", ws("decoy_link"));
    fs::create_symlink(decoy_dir_, ws("decoy_dir_link"));
    passwd_before_ = read_file("/etc/passwd");
    passwd_stat_before_ = stat_of("/etc/passwd");
  }
  void TearDown() override {
    // Whatever happened, the host is as it was.
    EXPECT_EQ(read_file("/etc/passwd"), passwd_before_);
    struct stat after = stat_of("/etc/passwd");
    EXPECT_EQ(after.st_ino, passwd_stat_before_.st_ino);
    EXPECT_EQ(after.st_mtim.tv_sec, passwd_stat_before_.st_mtim.tv_sec);
    EXPECT_EQ(after.st_mtim.tv_nsec, passwd_stat_before_.st_mtim.tv_nsec);
    for (const char* stray : {"/etc/sandboxd_text_editor_test", "/tmp/sandboxd_text_editor_test"}) {
      EXPECT_FALSE(fs::exists(stray)) << stray;
      fs::remove(stray);
    }
    EXPECT_EQ(read_file(decoy_dir_ + "/secret.txt"), kDecoy);
    std::vector<std::string> decoy_names;
    for (const auto& entry : fs::directory_iterator(decoy_dir_))
      decoy_names.push_back(entry.path().filename());
    EXPECT_EQ(decoy_names, std::vector<std::string>{"secret.txt"});
    TextEditorTest::TearDown();
  }

  static std::string escape(const std::string& sandbox_path) {
    return "Path '" + sandbox_path + "' leads outside its mount through a symbolic link";
  }

  static constexpr const char* kDecoy = "host secret\n";
  std::string decoy_dir_;
  std::string passwd_before_;
  struct stat passwd_stat_before_ {};
};

TEST_F(TextEditorSymlinkTest, ViewThroughSymlinksOutOfTheMountFails) {
  expect_error(view("passwd_link"), escape("/home/agent/workspace/passwd_link"));
  expect_error(view("root_link"), escape("/home/agent/workspace/root_link"));
  expect_error(view("root_link/etc/passwd"), escape("/home/agent/workspace/root_link/etc/passwd"));
  expect_error(view("etc_link"), escape("/home/agent/workspace/etc_link"));
  expect_error(view("etc_link/passwd"), escape("/home/agent/workspace/etc_link/passwd"));
  expect_error(view("/home/agent/workspace/etc_link/passwd", 1, -1),
               escape("/home/agent/workspace/etc_link/passwd"));
  expect_error(view("decoy_link"), escape("/home/agent/workspace/decoy_link"));
}

TEST_F(TextEditorSymlinkTest, CreateThroughSymlinksOutOfTheMountFails) {
  expect_error(create("passwd_link", passwd_before_), escape("/home/agent/workspace/passwd_link"));
  expect_error(create("etc_link/sandboxd_text_editor_test", "x"),
               escape("/home/agent/workspace/etc_link/sandboxd_text_editor_test"));
  expect_error(create("root_link/tmp/sandboxd_text_editor_test", "x"),
               escape("/home/agent/workspace/root_link/tmp/sandboxd_text_editor_test"));
  expect_error(create("decoy_link", "owned\n"), escape("/home/agent/workspace/decoy_link"));
  expect_error(create("decoy_dir_link/new.txt", "x"), escape("/home/agent/workspace/decoy_dir_link/new.txt"));
  expect_error(create("decoy_dir_link/sub/dir/new.txt", "x"),
               escape("/home/agent/workspace/decoy_dir_link/sub/dir/new.txt"));
  // the links themselves are left alone
  EXPECT_EQ(fs::read_symlink(ws("passwd_link")), "/etc/passwd");
  EXPECT_EQ(fs::read_symlink(ws("etc_link")), "/etc");
  EXPECT_EQ(fs::read_symlink(ws("decoy_link")), decoy_dir_ + "/secret.txt");
}

TEST_F(TextEditorSymlinkTest, EditsThroughSymlinksOutOfTheMountFail) {
  const std::string absent = "sandboxd text editor test: not in any file";
  expect_error(replace("passwd_link", absent, "x"), escape("/home/agent/workspace/passwd_link"));
  expect_error(replace("etc_link/passwd", absent, "x"), escape("/home/agent/workspace/etc_link/passwd"));
  expect_error(replace("decoy_link", "secret", "owned"), escape("/home/agent/workspace/decoy_link"));
  expect_error(insert("decoy_link", 0, "owned"), escape("/home/agent/workspace/decoy_link"));
  expect_error(replace("decoy_dir_link/secret.txt", "secret", "owned"),
               escape("/home/agent/workspace/decoy_dir_link/secret.txt"));
  const std::string through_root = "root_link" + decoy_dir_ + "/secret.txt";
  expect_error(insert(through_root, 0, "owned"), escape("/home/agent/workspace/" + through_root));
}

TEST_F(TextEditorSymlinkTest, RelativeSymlinkIntoASiblingHostFolderFails) {
  // On the host the uploads folder sits next to the workspace; "../uploads" must not reach it.
  write_file(paths_.uploads + "/secret.txt", "not through here\n");
  fs::create_symlink("../uploads/secret.txt", ws("sibling"));
  fs::create_symlink("..", ws("parent"));
  expect_error(view("sibling"), escape("/home/agent/workspace/sibling"));
  expect_error(create("sibling", "x"), escape("/home/agent/workspace/sibling"));
  expect_error(view("parent/uploads/secret.txt"), escape("/home/agent/workspace/parent/uploads/secret.txt"));
  expect_error(create("parent/uploads/new.txt", "x"), escape("/home/agent/workspace/parent/uploads/new.txt"));
  EXPECT_EQ(read_file(paths_.uploads + "/secret.txt"), "not through here\n");
  EXPECT_FALSE(fs::exists(paths_.uploads + "/new.txt"));
}

TEST_F(TextEditorSymlinkTest, DirectoryListingDoesNotEnterSymlinks) {
  auto result = view("/home/agent/workspace");
  expect_view(result, "decoy_dir_link\ndecoy_link\netc_link\npasswd_link\nroot_link", 5, 1, 5, "directory");
}

TEST_F(TextEditorSymlinkTest, SymlinksInsideTheMountWork) {
  write_file(ws("real/config.txt"), "mode = old\n");
  fs::create_symlink("real/config.txt", ws("config_link"));
  fs::create_symlink("real", ws("real_dir_link"));
  expect_view(view("config_link"), "mode = old", 1, 1, 1);
  expect_view(view("real_dir_link/config.txt"), "mode = old", 1, 1, 1);

  // Editing through the link edits its target and keeps the link.
  auto replaced = replace("config_link", "old", "new");
  ASSERT_EQ(text(replaced.at("type")), kChangeType) << json::serialize(replaced);
  EXPECT_TRUE(fs::is_symlink(ws("config_link")));
  EXPECT_EQ(read_file(ws("real/config.txt")), "mode = new\n");

  auto created = create("config_link", "mode = created\n");
  ASSERT_EQ(text(created.at("type")), kCreateType) << json::serialize(created);
  EXPECT_TRUE(created.at("is_file_update").as_bool());
  EXPECT_TRUE(fs::is_symlink(ws("config_link")));
  EXPECT_EQ(read_file(ws("real/config.txt")), "mode = created\n");

  created = create("real_dir_link/other.txt", "other\n");
  ASSERT_EQ(text(created.at("type")), kCreateType) << json::serialize(created);
  EXPECT_EQ(read_file(ws("real/other.txt")), "other\n");
}

TEST_F(TextEditorSymlinkTest, DanglingSymlinkIsNotFollowedOnCreate) {
  fs::create_symlink("nowhere.txt", ws("dangling"));
  expect_error(view("dangling"), "File not found: /home/agent/workspace/dangling");
  expect_error(create("dangling", "x"),
               "Cannot write /home/agent/workspace/dangling: it is a symbolic link to a missing file");
  EXPECT_FALSE(fs::exists(ws("nowhere.txt")));
}

}  // namespace
