// A command's result lists the files it wrote under outputs/ (Anthropic's `content`),
// and a command that wrote nothing there is told so without a walk of the container's
// folders (the kernel's inotify events, store/tree_changes.h). End to end against a
// real `sandboxd serve`: every kind of change is listed, through folders made by the
// command itself and past the watched folders' cap, and the walk really is skipped.

#include <gtest/gtest.h>

#include <algorithm>

#include "server_harness.h"
#include "shared_server_suite.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

const std::string kOutputs = "/mnt/user-data/outputs/";

class OutputsListed : public SharedServerSuite {
 protected:
  static void SetUpTestSuite() { start_server(); }
  void SetUp() override { name_container("o"); }

  bj::object bash(const std::string& command) {
    std::ofstream(*work / "body.json") << bj::serialize(bj::object{{"command", command}});
    return server
        ->curl_json("-X POST " + server->base() + "/containers/" + container +
                    "/tools/bash_code_execution -d @" + (*work / "body.json").string())
        .as_object();
  }
  // The sandbox paths a command's result lists, sorted.
  std::vector<std::string> listed_by(const std::string& command) {
    auto result = bash(command);
    EXPECT_EQ(result.at("return_code"), 0) << command << ": " << bj::serialize(result);
    std::vector<std::string> ids;
    for (const auto& block : result.at("content").as_array()) {
      EXPECT_EQ(block.at("type"), "bash_code_execution_output");
      ids.emplace_back(block.at("file_id").as_string());
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  static std::vector<std::string> ids_of(std::vector<std::string> paths) {
    std::vector<std::string> ids;
    for (const auto& path : paths) ids.push_back(file_id(kOutputs + path));
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  static double walked() { return server->metric("sandboxd_output_walks_total"); }
  static double skipped() { return server->metric("sandboxd_output_walks_skipped_total"); }
};

using Paths = std::vector<std::string>;

TEST_F(OutputsListed, EveryKindOfChangeIsListedAndNothingElse) {
  EXPECT_EQ(listed_by("true"), Paths{});  // the sandbox starts: its first walk watches
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo a > " + kOutputs + "a.txt"), ids_of({"a.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
  // New nested folders made by the command, then a file in the deepest one changed by a
  // later command alone: the folders the first one made are watched too.
  EXPECT_EQ(listed_by("mkdir -p " + kOutputs + "x/y && echo z > " + kOutputs + "x/y/z.txt"),
            ids_of({"x/y/z.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo more >> " + kOutputs + "x/y/z.txt"), ids_of({"x/y/z.txt"}));
  // Written elsewhere, then moved in.
  EXPECT_EQ(listed_by("echo w > w.txt"), Paths{});
  EXPECT_EQ(listed_by("mv w.txt " + kOutputs + "x/moved.txt"), ids_of({"x/moved.txt"}));
  // Its times, its mode.
  EXPECT_EQ(listed_by("touch " + kOutputs + "a.txt"), ids_of({"a.txt"}));
  EXPECT_EQ(listed_by("chmod 600 " + kOutputs + "a.txt"), ids_of({"a.txt"}));
  EXPECT_EQ(listed_by("cat " + kOutputs + "a.txt >/dev/null"), Paths{});
  // A folder removed and made again: its new self is watched.
  EXPECT_EQ(
      listed_by("rm -r " + kOutputs + "x && mkdir " + kOutputs + "x && echo n > " + kOutputs + "x/n.txt"),
      ids_of({"x/n.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo m >> " + kOutputs + "x/n.txt"), ids_of({"x/n.txt"}));
  // A folder renamed with its files changes no file (their change times stay, so a walk
  // lists none either); the renamed folder is still watched.
  EXPECT_EQ(listed_by("mv " + kOutputs + "x " + kOutputs + "renamed"), Paths{});
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo r >> " + kOutputs + "renamed/n.txt"), ids_of({"renamed/n.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
}

// A file with two names under outputs/ (the sandbox cannot link across its mounts),
// written through one of them: both names are listed, as the walk lists them.
TEST_F(OutputsListed, AFileWithTwoNamesIsListedUnderBoth) {
  EXPECT_EQ(listed_by("echo a > " + kOutputs + "linked.txt && mkdir " + kOutputs + "sub"),
            ids_of({"linked.txt"}));
  auto across = bash("ln " + kOutputs + "linked.txt elsewhere.txt");
  EXPECT_NE(across.at("return_code"), 0) << bj::serialize(across);
  EXPECT_EQ(listed_by("ln " + kOutputs + "linked.txt " + kOutputs + "sub/other.txt"),
            ids_of({"linked.txt", "sub/other.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo b >> " + kOutputs + "sub/other.txt"), ids_of({"linked.txt", "sub/other.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
}

// Past 64 folders a container's trees are not watched: it walks as before, and lists
// exactly as before.
TEST_F(OutputsListed, AContainerWithMoreFoldersThanItMayWatchStillListsCorrectly) {
  EXPECT_EQ(listed_by("mkdir -p " + kOutputs + "many/d{1..80}"), Paths{});
  const double walked_before = walked(), skipped_before = skipped();
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo f > " + kOutputs + "many/d77/f.txt"), ids_of({"many/d77/f.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo g >> " + kOutputs + "many/d77/f.txt"), ids_of({"many/d77/f.txt"}));
  EXPECT_EQ(listed_by("echo h > " + kOutputs + "many/d2/h.txt"), ids_of({"many/d2/h.txt"}));
  EXPECT_EQ(walked() - walked_before, 5);
  EXPECT_EQ(skipped() - skipped_before, 0);
  // Back under the cap, it is watched again: the walks stop.
  EXPECT_EQ(listed_by("rm -r " + kOutputs + "many"), Paths{});
  EXPECT_EQ(listed_by("true"), Paths{});
  const double skipped_small = skipped();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_GE(skipped() - skipped_small, 4);
}

// Warm commands that write nothing are told so without a walk.
TEST_F(OutputsListed, CommandsThatWriteNothingAreNotFollowedByAWalk) {
  EXPECT_EQ(listed_by("echo a > " + kOutputs + "a.txt"), ids_of({"a.txt"}));
  const double before = skipped();
  ASSERT_GE(before, 0) << "no sandboxd_output_walks_skipped_total in /metrics";
  for (int i = 0; i < 20; ++i) EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_GE(skipped() - before, 15);
  // And the index stays as fresh as before: a listing finds what a command wrote.
  EXPECT_EQ(listed_by("echo b > " + kOutputs + "b.txt"), ids_of({"b.txt"}));
  auto files = server->curl_json("'" + server->base() + "/files?scope_id=" + container + "'");
  std::vector<std::string> names;
  for (const auto& file : files.at("data").as_array()) names.emplace_back(file.at("filename").as_string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (Paths{"a.txt", "b.txt"})) << files;
}

// A restart stops the sandbox (its watches go) and empties the workspace: the next
// command walks and lists what it writes.
TEST_F(OutputsListed, ARestartedSandboxListsWhatItsCommandsWrite) {
  EXPECT_EQ(listed_by("echo a > " + kOutputs + "a.txt"), ids_of({"a.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
  std::ofstream(*work / "body.json") << bj::serialize(bj::object{{"restart", true}});
  server->curl("-X POST " + server->base() + "/containers/" + container + "/tools/bash_code_execution -d @" +
               (*work / "body.json").string());
  EXPECT_EQ(listed_by("echo b >> " + kOutputs + "a.txt"), ids_of({"a.txt"}));
  EXPECT_EQ(listed_by("true"), Paths{});
  EXPECT_EQ(listed_by("echo c >> " + kOutputs + "a.txt"), ids_of({"a.txt"}));
}

// The persistent Python's cells are judged the same way: a cell that saved a file lists
// it (code_execution_output), one that saved nothing lists nothing.
TEST_F(OutputsListed, PythonCellsListWhatTheySaved) {
  auto cell = [&](const std::string& code) {
    std::ofstream(*work / "body.json") << bj::serialize(bj::object{{"code", code}});
    auto result = server
                      ->curl_json("-X POST " + server->base() + "/containers/" + container +
                                  "/tools/code_execution -d @" + (*work / "body.json").string())
                      .as_object();
    EXPECT_EQ(result.at("return_code"), 0) << code << ": " << bj::serialize(result);
    std::vector<std::string> ids;
    for (const auto& block : result.at("content").as_array()) {
      EXPECT_EQ(block.at("type"), "code_execution_output");
      ids.emplace_back(block.at("file_id").as_string());
    }
    return ids;
  };
  EXPECT_EQ(cell("x = 1"), Paths{});
  EXPECT_EQ(cell("x + 1"), Paths{});
  EXPECT_EQ(cell("open('" + kOutputs + "p.txt', 'w').write('p')"), ids_of({"p.txt"}));
  const double skipped_before = skipped();
  EXPECT_EQ(cell("x + 2"), Paths{});
  EXPECT_EQ(skipped() - skipped_before, 1);  // no walk for it
  EXPECT_EQ(cell("open('" + kOutputs + "p.txt', 'a').write('q')"), ids_of({"p.txt"}));
}

}  // namespace
