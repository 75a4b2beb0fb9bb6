// The Skills suite's shared part: the helpers, a server with a scripted upstream, and the
// tests of skills in a sandbox (container.skills in /messages), which run on both tiers:
// skills_test.cc instantiates them on the native tier (with the Skills API's own tests),
// gvisor_skills_test.cc on the gvisor tier.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "sandbox_fixture.h"
#include "scripted_upstream.h"
#include "server_harness.h"

namespace {

using namespace sandboxd::testing;
namespace bj = boost::json;
using U = ScriptedUpstream;

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A skill folder on disk: files by relative path.
fs::path write_tree(const fs::path& root, const std::map<std::string, std::string>& files) {
  for (const auto& [path, text] : files) {
    fs::create_directories((root / path).parent_path());
    std::ofstream(root / path, std::ios::binary) << text;
  }
  return root;
}

const std::string kReportSkillMd =
    "---\nname: report-maker\ndescription: Writes a greeting report into the outputs folder. Use for "
    "greetings.\n---\n"
    "# Report maker\nRun `bash /mnt/skills/report-maker/scripts/make_report.sh NAME` to write NAME to "
    "outputs.\n";
const std::string kReportScript =
    "#!/bin/bash\nset -e\nprintf 'report by the skill for %s\\n' \"$(whoami)\" > "
    "\"/mnt/user-data/outputs/$1\"\n"
    "echo \"wrote $1\"\n";

// A server with a scripted upstream, shared by a suite's tests (`Self`: the suite, so
// that each suite has its own).
template <typename Self>
class SkillsServer {
 public:
  // `runtime_yaml`: more of the runtime section (indented by two spaces).
  static void start_server(const std::string& runtime_yaml) {
    upstream = new ScriptedUpstream();
    server = new ServerProcess("model:\n  baseUrl: \"" + upstream->base_url() +
                               "\"\n  models: { default: upstream-model }\n  timeoutSec: 30\n"
                               "runtime:\n  skillMaxSize: 64Ki\n  skillMaxFiles: 20\n" +
                               runtime_yaml);
  }
  static void stop_server() {
    delete server;
    delete upstream;
    server = nullptr;
    upstream = nullptr;
  }

 protected:
  void prepare_test() {
    name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name)
      if (c == '/') c = '-';  // a parametrised test's name
    work = server->dir() / ("work-" + name);
    fs::create_directories(work);
  }
  void expect_every_step_used() {
    if (upstream) EXPECT_EQ(upstream->pending_steps(), 0u) << "every scripted step was used";
  }

  // POST (or another method) with multipart files: each (path on disk, filename sent).
  bj::value upload(const std::string& url, const std::vector<std::pair<fs::path, std::string>>& files,
                   const std::string& extra = "", const std::string& token = "secret-alice",
                   int* status = nullptr) {
    std::string args = "-X POST " + quoted(url) + " " + extra;
    for (const auto& [path, filename] : files)
      args += " -F " + quoted("files[]=@" + path.string() + ";filename=" + filename);
    std::string out = server->curl("-w '\\n%{http_code}' " + args, token);
    auto cut = out.rfind('\n');
    if (status) *status = std::stoi(out.substr(cut + 1));
    return json(out.substr(0, cut));
  }
  // Uploads a folder as files[] with the folder's own name as the top folder.
  bj::value upload_tree(const fs::path& root, int* status = nullptr, const std::string& url = "") {
    std::vector<std::pair<fs::path, std::string>> files;
    for (const auto& entry : fs::recursive_directory_iterator(root))
      if (entry.is_regular_file())
        files.push_back(
            {entry.path(), root.filename().string() + "/" + fs::relative(entry.path(), root).string()});
    return upload(url.empty() ? server->base() + "/skills" : url, files, "", "secret-alice", status);
  }
  fs::path report_skill(const std::string& folder = "report-maker") {
    return write_tree(work / folder,
                      {{"SKILL.md", kReportSkillMd}, {"scripts/make_report.sh", kReportScript}});
  }
  // A zip made by Python's zipfile from a small script given the archive as `z`.
  fs::path make_zip(const std::string& python_body) {
    fs::path zip = work / "upload.zip";
    fs::path script = work / "make_zip.py";
    std::ofstream(script)
        << "import zipfile, sys, stat\nz = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED)\n"
        << python_body << "\nz.close()\n";
    int status = -1;
    sh("python3 " + script.string() + " " + zip.string(), &status);
    EXPECT_EQ(status, 0);
    return zip;
  }
  // Nothing of a refused upload is kept: no record, no stored files, no staging left.
  void expect_nothing_stored() {
    auto listing = server->curl_json(quoted(server->base() + "/skills?source=custom"));
    EXPECT_EQ(listing.at("data").as_array().size(), 0u) << listing;
    size_t entries = 0;
    std::error_code ec;
    for (const auto& entry : fs::recursive_directory_iterator(server->data_dir() / "skills", ec)) {
      (void)entry;
      ++entries;
    }
    const bool staging_only =
        entries == 0 || (entries == 1 && fs::is_directory(server->data_dir() / "skills/.staging"));
    EXPECT_TRUE(staging_only) << "something was stored under skills/ (" << entries << " entries)";
  }
  void expect_refused(const bj::value& reply, int status, const std::string& phrase) {
    EXPECT_EQ(status, 400) << reply;
    EXPECT_EQ(reply.at("type"), "error") << reply;
    EXPECT_EQ(reply.at("error").at("type"), "invalid_request_error") << reply;
    EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find(phrase), std::string::npos)
        << reply;
    expect_nothing_stored();
  }
  bj::object messages_body(const std::string& container, bj::array skills, bool stream = false) {
    bj::object c{{"id", container}};
    if (!skills.empty()) c["skills"] = std::move(skills);
    return {{"model", "default"},
            {"max_tokens", 1024},
            {"stream", stream},
            {"container", std::move(c)},
            {"tools", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_20250825"}}}},
            {"messages", bj::array{bj::object{{"role", "user"}, {"content", "make the report"}}}}};
  }
  // The scripted model's next turn: one bash_code_execution call of `command` (id
  // `tool_id`), then `closing` as its answer once the result comes back.
  void script_bash_turn(const std::string& tool_id, const std::string& command, const std::string& closing) {
    upstream->push_message(
        U::message({U::tool_use(tool_id, "bash_code_execution", {{"command", command}})}, "tool_use"));
    upstream->push_message(U::message({U::text_block(closing)}, "end_turn"));
  }
  std::string post_messages(const bj::object& body, int* status = nullptr,
                            const std::string& token = "secret-alice") {
    fs::path file = work / ("body-" + std::to_string(++posts) + ".json");
    std::ofstream(file) << bj::serialize(body);
    std::string out = server->curl("-w '\\n%{http_code}' -X POST " + quoted(server->base() + "/messages") +
                                       " -H 'content-type: application/json' --data-binary @" + file.string(),
                                   token);
    auto cut = out.rfind('\n');
    if (status) *status = std::stoi(out.substr(cut + 1));
    return out.substr(0, cut);
  }
  void delete_all_skills() {
    auto listing = server->curl_json(quoted(server->base() + "/skills?source=custom&limit=100"));
    for (const auto& skill : listing.at("data").as_array())
      server->curl("-X DELETE " +
                   quoted(server->base() + "/skills/" + std::string(skill.at("id").as_string())));
  }

  static inline ScriptedUpstream* upstream = nullptr;
  static inline ServerProcess* server = nullptr;
  std::string name;
  fs::path work;
  int posts = 0;
};

// Skills in a running sandbox, on the tier of the executable's instantiation. The server
// starts with the first test (a suite's parameter is not known before).
class SkillsInSandboxTest : public ::testing::TestWithParam<SandboxTier>,
                            public SkillsServer<SkillsInSandboxTest> {
 protected:
  static void TearDownTestSuite() { stop_server(); }
  void SetUp() override {
    if (GetParam() == SandboxTier::kGvisor && rt::find_runsc().empty())
      GTEST_SKIP()
          << "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here";
    if (!server)
      start_server(GetParam() == SandboxTier::kGvisor ? "  isolation: gvisor\n  gvisorPlatform: ptrace\n"
                                                      : "");
    prepare_test();
  }
  void TearDown() override { expect_every_step_used(); }
};

// The skill appears in a sandbox that already runs (started by an earlier command), its
// script writes an output the Files API serves, and it is gone for the next request.
TEST_P(SkillsInSandboxTest, MessagesLoadSkillForThatRequestOnly) {
  int status = 0;
  auto skill = upload_tree(report_skill(), &status);
  ASSERT_EQ(status, 200) << skill;
  const std::string id(skill.at("id").as_string()), version(skill.at("latest_version_id").as_string());
  const std::string container = "skills-run";
  // A running sandbox first, with no skills in it.
  auto before = server->curl_json(
      "-X POST " + quoted(server->base() + "/containers/" + container + "/tools/bash_code_execution") +
      " -d '{\"command\": \"ls -A /mnt/skills | wc -l\"}'");
  EXPECT_EQ(before.at("stdout"), "0\n") << before;

  const std::string command =
      "head -3 /mnt/skills/report-maker/SKILL.md && bash /mnt/skills/report-maker/scripts/make_report.sh "
      "hello.txt && "
      "(touch /mnt/skills/report-maker/new 2>/dev/null && echo writable || echo read-only)";
  script_bash_turn("toolu_sk1", command, "Done.");
  const size_t requests_before = upstream->requests().size();
  auto reply = json(post_messages(
      messages_body(container, bj::array{bj::object{{"type", "custom"}, {"skill_id", id}}}), &status));
  ASSERT_EQ(status, 200) << reply;
  const auto& content = reply.at("content").as_array();
  ASSERT_GE(content.size(), 2u) << reply;
  const auto& result = content[1].at("content").as_object();
  EXPECT_EQ(result.at("return_code"), 0) << result;
  const std::string out(result.at("stdout").as_string());
  EXPECT_NE(out.find("name: report-maker"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote hello.txt"), std::string::npos) << out;
  EXPECT_NE(out.find("read-only"), std::string::npos) << out;
  const auto& shown = reply.at("container").at("skills").as_array();
  ASSERT_EQ(shown.size(), 1u);
  EXPECT_EQ(shown[0], (bj::object{{"type", "custom"}, {"skill_id", id}, {"version", version}}));
  // The upstream was told the skill's name, description and path.
  auto requests = upstream->requests();
  ASSERT_GT(requests.size(), requests_before);
  const std::string system = bj::serialize(requests[requests_before].at("system"));
  EXPECT_NE(system.find("report-maker"), std::string::npos) << system;
  EXPECT_NE(system.find("Writes a greeting report"), std::string::npos) << system;
  EXPECT_NE(system.find("/mnt/skills/report-maker/SKILL.md"), std::string::npos) << system;

  // The Files API serves what the skill's script wrote.
  auto files = server->curl_json(quoted(server->base() + "/files?scope_id=" + container));
  std::string file_id;
  for (const auto& f : files.at("data").as_array())
    if (f.at("filename") == "hello.txt") file_id = std::string(f.at("id").as_string());
  ASSERT_FALSE(file_id.empty()) << files;
  EXPECT_EQ(server->curl(quoted(server->base() + "/files/" + file_id + "/content?scope_id=" + container)),
            "report by the skill for agent\n");

  // A later request without skills, in the same container and sandbox: none there.
  script_bash_turn(
      "toolu_sk2",
      "test -e /mnt/skills/report-maker && echo present || echo absent; ls -A /mnt/skills | wc -l",
      "Checked.");
  auto later = json(post_messages(messages_body(container, {}), &status));
  ASSERT_EQ(status, 200) << later;
  EXPECT_EQ(later.at("content").as_array()[1].at("content").at("stdout"), "absent\n0\n") << later;
  // Anthropic's Container always has `skills`: null when none were loaded.
  EXPECT_TRUE(later.at("container").at("skills").is_null()) << later;
  delete_all_skills();
}

// From inside the sandbox: a process that a skills request leaves behind with its
// working directory in the skill (or a file of it open) would go on reading the skill
// through the detached bind after the request. Such processes are ended as the skill
// comes off; another background process of the same request that does not use the skill
// keeps running, and another owner's work goes on.
TEST_P(SkillsInSandboxTest, AProcessLeftInsideASkillIsEndedWhenTheSkillComesOff) {
  int status = 0;
  auto skill = upload_tree(report_skill(), &status);
  ASSERT_EQ(status, 200) << skill;
  const std::string id(skill.at("id").as_string());
  const std::string container = "skills-linger";
  // Three background processes: one with its working directory in the skill, one with
  // SKILL.md open (its working directory elsewhere), one that never touches the skill.
  const std::string command =
      "cd /mnt/skills/report-maker && (setsid bash -c 'while cat SKILL.md >/dev/null; do sleep 0.2; done' "
      "</dev/null >/dev/null 2>&1 & echo $! > /tmp/in-cwd.pid); "
      "cd /tmp && (setsid bash -c 'exec 7</mnt/skills/report-maker/SKILL.md; cd /; while true; do sleep 0.2; "
      "done' "
      "</dev/null >/dev/null 2>&1 & echo $! > /tmp/open-fd.pid); "
      "(setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > /tmp/bystander.pid); "
      "sleep 0.5; for f in in-cwd open-fd bystander; do kill -0 $(cat /tmp/$f.pid) && echo $f-running; done";
  script_bash_turn("toolu_linger", command, "Started.");
  auto reply = json(post_messages(
      messages_body(container, bj::array{bj::object{{"type", "custom"}, {"skill_id", id}}}), &status));
  ASSERT_EQ(status, 200) << reply;
  EXPECT_EQ(reply.at("content").as_array()[1].at("content").at("stdout"),
            "in-cwd-running\nopen-fd-running\nbystander-running\n")
      << reply;
  // After the request: the skill is gone from /mnt/skills, the two that used it are
  // ended (waited for from inside, a bounded poll), the bystander runs on.
  const std::string check =
      "ls -A /mnt/skills | wc -l; for f in in-cwd open-fd; do p=$(cat /tmp/$f.pid); "
      "for i in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; "
      "kill -0 $p 2>/dev/null && echo $f-alive || echo $f-ended; done; "
      "kill -0 $(cat /tmp/bystander.pid) && echo bystander-alive";
  auto after = server->curl_json(
      "-X POST " + quoted(server->base() + "/containers/" + container + "/tools/bash_code_execution") +
      " -d " + quoted(bj::serialize(bj::object{{"command", check}})));
  EXPECT_EQ(after.at("stdout"), "0\nin-cwd-ended\nopen-fd-ended\nbystander-alive\n") << after;
  auto bob = server->curl_json(
      "-X POST " + quoted(server->base() + "/containers/bob-linger/tools/bash_code_execution") +
          " -d '{\"command\": \"echo bob-ok\"}'",
      "secret-bob-x");
  EXPECT_EQ(bob.at("stdout"), "bob-ok\n") << bob;
  server->curl("-X DELETE " + quoted(server->base() + "/containers/" + container));
  server->curl("-X DELETE " + quoted(server->base() + "/containers/bob-linger"), "secret-bob-x");
  delete_all_skills();
}

// A built-in skill (pptx: its writer needs only Python's zipfile), streamed: the script
// makes a deck in outputs; the final message_delta's container names the skill.
TEST_P(SkillsInSandboxTest, StreamingBuiltinSkill) {
  const std::string command =
      "cat > /tmp/deck.json <<'EOF'\n"
      "{\"title\": \"Skills test\", \"slides\": [{\"title\": \"Point one\", \"bullets\": [\"alpha\", "
      "[\"beta\"]]}]}\n"
      "EOF\n"
      "python3 /mnt/skills/pptx/scripts/make_pptx.py /tmp/deck.json /mnt/user-data/outputs/deck.pptx";
  script_bash_turn("toolu_pp1", command, "Your deck is ready.");
  int status = 0;
  const std::string container = "skills-stream";
  std::string events = post_messages(
      messages_body(container, bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "pptx"}}},
                    /*stream=*/true),
      &status);
  ASSERT_EQ(status, 200) << events;
  EXPECT_NE(events.find("wrote /mnt/user-data/outputs/deck.pptx: 2 slides"), std::string::npos) << events;
  auto at = events.find("event: message_delta");
  ASSERT_NE(at, std::string::npos) << events;
  auto data = json(events.substr(events.find("data: ", at) + 6, events.find('\n', events.find("data: ", at)) -
                                                                    events.find("data: ", at) - 6));
  const auto& skills = data.at("delta").at("container").at("skills").as_array();
  ASSERT_EQ(skills.size(), 1u) << data;
  EXPECT_EQ(skills[0].at("skill_id"), "pptx");
  EXPECT_FALSE(std::string(skills[0].at("version").as_string()).empty());
  EXPECT_NE(skills[0].at("version"), "latest") << "the resolved version";

  // The deck, downloaded, is a presentation whose slide says what the spec said.
  auto files = server->curl_json(quoted(server->base() + "/files?scope_id=" + container));
  std::string file_id;
  for (const auto& f : files.at("data").as_array())
    if (f.at("filename") == "deck.pptx") file_id = std::string(f.at("id").as_string());
  ASSERT_FALSE(file_id.empty()) << files;
  const fs::path deck = work / "deck.pptx";
  server->curl("-o " + deck.string() + " " +
               quoted(server->base() + "/files/" + file_id + "/content?scope_id=" + container));
  int rc = -1;
  std::string text =
      sh("python3 " + std::string(SANDBOXD_SOURCE_DIR) + "/skills/pptx/scripts/read_pptx.py " + deck.string(),
         &rc);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("Point one\nalpha\nbeta"), std::string::npos) << text;
}

}  // namespace
