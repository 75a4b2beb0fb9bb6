// The Workspace end to end (docs/workspace.md): a real `sandboxd serve` with a scripted upstream
// model. Threads are owner-scoped; a message runs the tool loop with the thread as the
// container and the stored conversation as the history; code execution follows the
// contract's rule (Skills add it, pgpt.tools asks for it, features.codeExecution.enabled
// false removes both and plain chat goes on); files a turn writes to outputs/ become
// artifacts and zylon-resource blocks; history survives a restart and only the last
// workspace.maxHistoryTurns turns go upstream. And the web page's static files.

#include <gtest/gtest.h>

#include <future>
#include <list>
#include <map>

#include "scripted_upstream.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;
using U = ScriptedUpstream;

namespace {

std::string model_yaml(const ScriptedUpstream& upstream) {
  return "model:\n  baseUrl: \"" + upstream.base_url() +
         "\"\n  models: { default: upstream-model }\n  maxToolIterations: 5\n  timeoutSec: 20\n";
}

// A command that writes a small PNG with python3's zlib and struct (no imaging library
// needed), the kind of chart a model makes.
const char* kWritePng =
    "python3 - <<'EOF'\n"
    "import struct, zlib\n"
    "w, h = 4, 3\n"
    "raw = b''.join(b'\\x00' + bytes([200, 30 * y, 90]) * w for y in range(h))\n"
    "def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))\n"
    "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))\n"
    "png += chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n"
    "open('/mnt/user-data/outputs/chart.png', 'wb').write(png)\n"
    "EOF";

std::vector<std::string> block_types(const bj::array& content) {
  std::vector<std::string> types;
  for (const auto& block : content) types.emplace_back(block.at("type").as_string());
  return types;
}

const bj::object* find_block(const bj::array& content, std::string_view type) {
  for (const auto& block : content)
    if (block.at("type").as_string() == type) return &block.as_object();
  return nullptr;
}

class WorkspaceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    upstream = new ScriptedUpstream();
    server = new ServerProcess(model_yaml(*upstream) + "workspace:\n  maxHistoryTurns: 2\n");
  }
  static void TearDownTestSuite() {
    delete server;
    delete upstream;
  }
  void SetUp() override { baseline = upstream->requests().size(); }
  void TearDown() override { EXPECT_EQ(upstream->pending_steps(), 0u) << "every scripted step was used"; }

  std::vector<bj::object> sent() {
    auto all = upstream->requests();
    return {all.begin() + static_cast<long>(baseline), all.end()};
  }
  std::string thread_url(const std::string& id, const std::string& rest = "") {
    return server->url("/api/v1/app/thread/" + id + rest);
  }
  std::string body_file(const bj::object& body) {
    fs::path file = server->dir() / ("body-" + std::to_string(++posts) + ".json");
    std::ofstream(file) << bj::serialize(body);
    return file.string();
  }
  std::string create_thread(const std::string& token = "secret-alice") {
    auto reply = server->curl_json("-X POST '" + server->url("/api/v1/app/thread") + "'", token);
    return std::string(reply.at("id").as_string());
  }
  std::string post_message(const std::string& id, const bj::object& body,
                           const std::string& token = "secret-alice") {
    return server->curl("-X POST '" + thread_url(id, "/messages") +
                            "' -H 'content-type: application/json' --data-binary @" + body_file(body),
                        token);
  }
  int post_message_status(const std::string& id, const bj::object& body,
                          const std::string& token = "secret-alice") {
    return server->status("-X POST '" + thread_url(id, "/messages") +
                              "' -H 'content-type: application/json' --data-binary @" + body_file(body),
                          token);
  }
  bj::object get_thread(const std::string& id) {
    return server->curl_json("'" + thread_url(id) + "'").as_object();
  }

  static ScriptedUpstream* upstream;
  static ServerProcess* server;
  size_t baseline = 0;
  int posts = 0;
};
ScriptedUpstream* WorkspaceTest::upstream = nullptr;
ServerProcess* WorkspaceTest::server = nullptr;

TEST_F(WorkspaceTest, ThreadsAreCreatedListedNewestFirstRenamedAndOwnerScoped) {
  auto created =
      server->curl_json("-X POST '" + server->url("/api/v1/app/thread") + "' -d '{\"title\": \"Q3 sales\"}'");
  EXPECT_EQ(created.at("type"), "thread");
  EXPECT_EQ(created.at("title"), "Q3 sales");
  const std::string first(created.at("id").as_string());
  const std::string second = create_thread(), third = create_thread();

  auto page = server->curl_json("'" + server->url("/api/v1/app/thread?limit=2") + "'");
  ASSERT_EQ(page.at("data").as_array().size(), 2u);
  EXPECT_EQ(page.at("data").as_array()[0].at("id"), bj::value(third)) << "newest first";
  EXPECT_EQ(page.at("data").as_array()[1].at("id"), bj::value(second));
  EXPECT_EQ(page.at("has_more"), true);
  auto next = server->curl_json("'" + server->url("/api/v1/app/thread?limit=2&after_id=" + second) + "'");
  EXPECT_EQ(next.at("data").as_array()[0].at("id"), bj::value(first));

  auto renamed = server->curl_json("-X PATCH '" + thread_url(second) + "' -d '{\"title\": \"Renamed\"}'");
  EXPECT_EQ(renamed.at("title"), "Renamed");
  EXPECT_EQ(get_thread(second).at("title"), "Renamed");
  EXPECT_EQ(server->status("-X PATCH '" + thread_url(second) + "' -d '{\"title\": 5}'"), 400);
  EXPECT_EQ(server->status("-X POST '" + server->url("/api/v1/app/thread") + "' -d '{\"colour\": 1}'"), 400);

  // Another owner's thread answers exactly like a missing one.
  const std::string bob = "secret-bob-x";
  EXPECT_EQ(server->status("'" + thread_url(first) + "'", bob), 404);
  EXPECT_EQ(server->status("'" + thread_url(first, "/artifacts") + "'", bob), 404);
  EXPECT_EQ(server->status("-X PATCH '" + thread_url(first) + "' -d '{\"title\": \"x\"}'", bob), 404);
  EXPECT_EQ(server->status("-X DELETE '" + thread_url(first) + "'", bob), 404);
  EXPECT_EQ(post_message_status(first, {{"content", "hi"}}, bob), 404);
  EXPECT_EQ(server->status("'" + thread_url("thread_missing") + "'"), 404);
  auto bobs = server->curl_json("'" + server->url("/api/v1/app/thread") + "'", bob);
  EXPECT_TRUE(bobs.at("data").as_array().empty());
  EXPECT_EQ(sent().size(), 0u) << "nothing reached the model";
  EXPECT_EQ(get_thread(first).at("title"), "Q3 sales") << "bob's rename changed nothing";
}

TEST_F(WorkspaceTest, PlainChatOffersNoCodeExecutionAndIsStored) {
  const std::string id = create_thread();
  upstream->push_message(U::message({U::text_block("Hello! How can I help?")}, "end_turn", 12, 6));
  auto reply = json(post_message(id, {{"content", "Hello there"}})).as_object();
  EXPECT_EQ(reply.at("role"), "assistant");
  EXPECT_EQ(reply.at("content").as_array()[0].at("text"), "Hello! How can I help?");
  EXPECT_EQ(reply.at("stop_reason"), "end_turn");
  auto calls = sent();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_FALSE(calls[0].contains("tools")) << "ordinary chat: no code execution";
  EXPECT_EQ(calls[0].at("model"), "upstream-model");
  auto thread = get_thread(id);
  const auto& messages = thread.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0].at("role"), "user");
  EXPECT_EQ(messages[0].at("content"), "Hello there");
  EXPECT_EQ(messages[1].at("id"), reply.at("id"));
  EXPECT_EQ(messages[1].at("usage").at("input_tokens"), 12);
  EXPECT_EQ(thread.at("title"), "Hello there") << "the first message names an untitled thread";
  // Bad requests are refused before anything runs.
  EXPECT_EQ(post_message_status(id, {{"content", ""}}), 400);
  EXPECT_EQ(post_message_status(id, {{"content", "x"}, {"pgpt", {{"tools", bj::array{"web_fetch"}}}}}), 400);
  EXPECT_EQ(post_message_status(id, {{"content", "x"}, {"extra", 1}}), 400);
  EXPECT_EQ(sent().size(), 1u);
}

TEST_F(WorkspaceTest, PgptToolsRequestCodeExecutionAndOutputsBecomeArtifacts) {
  const std::string id = create_thread();
  upstream->push_message(
      U::message({U::text_block("Making the chart."),
                  U::tool_use("toolu_png", "bash_code_execution", {{"command", kWritePng}})},
                 "tool_use"));
  upstream->push_message(U::message({U::text_block("Here is your chart.")}, "end_turn"));
  auto reply =
      json(post_message(id, {{"content", "Chart it"}, {"pgpt", {{"tools", bj::array{"code_execution"}}}}}))
          .as_object();
  const auto& content = reply.at("content").as_array();
  ASSERT_EQ(block_types(content),
            (std::vector<std::string>{"text", "server_tool_use", "bash_code_execution_tool_result", "text",
                                      "zylon-resource"}))
      << bj::serialize(reply);
  EXPECT_EQ(content[2].at("content").at("return_code"), 0) << bj::serialize(content[2]);
  const auto& resource = content[4].as_object();
  EXPECT_EQ(resource.at("filename"), "chart.png");
  EXPECT_EQ(resource.at("mime_type"), "image/png");
  EXPECT_EQ(resource.at("message_id"), reply.at("id"));
  EXPECT_EQ(reply.at("container").at("id"), bj::value(id)) << "the thread is the container";

  auto calls = sent();
  ASSERT_EQ(calls.size(), 2u);
  ASSERT_TRUE(calls[0].contains("tools"));
  EXPECT_EQ(calls[0].at("tools").as_array()[0].at("name"), "bash_code_execution");

  // The artifact is the file the command wrote, downloadable through its URL.
  std::string bytes =
      server->curl("'" + server->url(std::string(resource.at("download_url").as_string())) + "'");
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(bytes.size(), resource.at("size_bytes").to_number<uint64_t>());
  std::string by_files_api =
      server->curl("'" + server->base() + "/files/" + std::string(resource.at("file_id").as_string()) +
                   "/content?scope_id=" + id + "'");
  EXPECT_EQ(bytes, by_files_api);
  auto artifacts = server->curl_json("'" + thread_url(id, "/artifacts") + "'");
  ASSERT_EQ(artifacts.at("data").as_array().size(), 1u);
  EXPECT_EQ(artifacts.at("data").as_array()[0].at("file_id"), resource.at("file_id"));
  EXPECT_EQ(artifacts.at("data").as_array()[0].at("message_id"), reply.at("id"));
  // The stored answer keeps the block.
  const auto thread = get_thread(id);
  const auto& stored = thread.at("messages").as_array()[1].at("content").as_array();
  ASSERT_NE(find_block(stored, "zylon-resource"), nullptr);
  EXPECT_EQ(find_block(stored, "zylon-resource")->at("file_id"), resource.at("file_id"));

  // A turn that changes nothing in outputs/ makes no artifact; one that rewrites the
  // file makes a new one.
  upstream->push_message(
      U::message({U::tool_use("toolu_ls", "bash_code_execution", {{"command", "ls /mnt/user-data/outputs"}})},
                 "tool_use"));
  upstream->push_message(U::message({U::text_block("Still there.")}, "end_turn"));
  auto quiet = json(post_message(id, {{"content", "List it"},
                                      {"pgpt",
                                       {{"tools", bj::array{bj::object{{"name", "code_execution"},
                                                                       {"type", "code_execution_v1"}}}}}}}))
                   .as_object();
  EXPECT_EQ(find_block(quiet.at("content").as_array(), "zylon-resource"), nullptr) << bj::serialize(quiet);
  EXPECT_EQ(server->curl_json("'" + thread_url(id, "/artifacts") + "'").at("data").as_array().size(), 1u);
}

// Anthropic's current tool versions through pgpt.tools: accepted, the chart listed in the
// bash result's content by file id, and error blocks without Zylon's `detail`.
TEST_F(WorkspaceTest, PgptToolsTakeAnthropicsToolVersions) {
  const std::string id = create_thread();
  // (the id: base64url of /mnt/user-data/outputs/chart.png)
  for (const char* version : {"code_execution_20260120", "code_execution_20260521"}) {
    upstream->push_message(
        U::message({U::tool_use("toolu_png2", "bash_code_execution", {{"command", kWritePng}}),
                    U::tool_use("toolu_miss", "text_editor_code_execution",
                                {{"command", "view"}, {"path", "missing.txt"}})},
                   "tool_use"));
    upstream->push_message(U::message({U::text_block("Done.")}, "end_turn"));
    auto reply =
        json(post_message(
                 id, {{"content", "Chart it"},
                      {"pgpt",
                       {{"tools", bj::array{bj::object{{"name", "code_execution"}, {"type", version}}}}}}}))
            .as_object();
    const auto& content = reply.at("content").as_array();
    const auto* bash = find_block(content, "bash_code_execution_tool_result");
    ASSERT_NE(bash, nullptr) << bj::serialize(reply);
    const bj::value outputs = bj::array{bj::object{
        {"type", "bash_code_execution_output"}, {"file_id", "L21udC91c2VyLWRhdGEvb3V0cHV0cy9jaGFydC5wbmc"}}};
    EXPECT_EQ(bash->at("content").at("content"), outputs) << bj::serialize(*bash);
    const auto* editor = find_block(content, "text_editor_code_execution_tool_result");
    ASSERT_NE(editor, nullptr) << bj::serialize(reply);
    EXPECT_FALSE(editor->at("content").as_object().contains("detail")) << bj::serialize(*editor);
    EXPECT_EQ(editor->at("content").at("error_message"), "File not found: /home/agent/workspace/missing.txt");
    EXPECT_EQ(sent()[0].at("tools").as_array()[0].at("name"), "bash_code_execution");
  }
}

TEST_F(WorkspaceTest, SkillsAddCodeExecution) {
  const std::string id = create_thread();
  upstream->push_message(U::message({U::text_block("Using the skill.")}, "end_turn"));
  auto reply =
      json(post_message(id, {{"content", "Make a spreadsheet"},
                             {"skills", bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "xlsx"}}}}}))
          .as_object();
  EXPECT_EQ(reply.at("stop_reason"), "end_turn") << bj::serialize(reply);
  auto calls = sent();
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_TRUE(calls[0].contains("tools")) << "Skills add code execution";
  EXPECT_EQ(calls[0].at("tools").as_array().size(), 2u);
  EXPECT_EQ(
      post_message_status(id, {{"content", "x"}, {"skills", bj::array{bj::object{{"type", "anthropic"}}}}}),
      400)
      << "a skill needs its skill_id";
}

TEST_F(WorkspaceTest, TheStreamCarriesTheStepsTheAnswerAndZylonResourceBlocks) {
  const std::string id = create_thread();
  upstream->push_message(
      U::message({U::tool_use("toolu_w", "bash_code_execution",
                              {{"command", "printf 'a,b\\n1,2\\n' > /mnt/user-data/outputs/table.csv"}})},
                 "tool_use"));
  upstream->push_message(U::message({U::text_block("Saved table.csv.")}, "end_turn"));
  std::string body = post_message(
      id,
      {{"content", "Save a table"}, {"stream", true}, {"pgpt", {{"tools", bj::array{"code_execution"}}}}});
  auto events = parse_sse(body);
  ASSERT_FALSE(events.empty()) << body;
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "message_stop");
  // Rebuild the message from its events.
  bj::array content;
  size_t resource_at = 0, delta_at = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (e.name == "content_block_start") {
      EXPECT_EQ(e.data.at("index").as_int64(), static_cast<int64_t>(content.size()));
      content.push_back(e.data.at("content_block"));
      if (e.data.at("content_block").at("type") == "zylon-resource") resource_at = i;
    }
    if (e.name == "content_block_delta" && e.data.at("delta").at("type") == "text_delta") {
      auto& block = content.at(e.data.at("index").as_int64()).as_object();
      block["text"] =
          std::string(block["text"].as_string()) + std::string(e.data.at("delta").at("text").as_string());
    }
    if (e.name == "message_delta") delta_at = i;
  }
  ASSERT_EQ(block_types(content),
            (std::vector<std::string>{"server_tool_use", "bash_code_execution_tool_result", "text",
                                      "zylon-resource"}));
  ASSERT_GT(resource_at, 0u);
  EXPECT_LT(resource_at, delta_at) << "the resource arrives before the message ends";
  const auto& resource = content.back().as_object();
  EXPECT_EQ(resource.at("filename"), "table.csv");
  EXPECT_EQ(resource.at("size_bytes"), 8);
  EXPECT_EQ(content[2].at("text"), "Saved table.csv.");
  EXPECT_EQ(server->curl("'" + server->url(std::string(resource.at("download_url").as_string())) + "'"),
            "a,b\n1,2\n");
  // Stored as streamed.
  const auto thread = get_thread(id);
  const auto& stored = thread.at("messages").as_array();
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(block_types(stored[1].at("content").as_array()), block_types(content));
  EXPECT_EQ(find_block(stored[1].at("content").as_array(), "zylon-resource")->at("file_id"),
            resource.at("file_id"));
  EXPECT_EQ(stored[1].at("id"), events.front().data.at("message").at("id"));
}

TEST_F(WorkspaceTest, OnlyTheLastTurnsGoUpstreamAndHistorySurvivesARestart) {
  const std::string id = create_thread();
  for (int i = 1; i <= 3; ++i) {
    upstream->push_message(U::message({U::text_block("answer " + std::to_string(i))}, "end_turn"));
    auto reply = json(post_message(id, {{"content", "question " + std::to_string(i)}}));
    ASSERT_EQ(reply.at("content").as_array()[0].at("text"), bj::value("answer " + std::to_string(i)))
        << bj::serialize(reply);
  }
  auto calls = sent();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].at("messages").as_array().size(), 3u) << "turn 1, then the new question";
  const auto& third = calls[2].at("messages").as_array();
  ASSERT_EQ(third.size(), 3u) << "maxHistoryTurns: 2 sends the previous turn and the new one";
  EXPECT_EQ(third[0].at("content").as_array()[0].at("text"), "question 2");
  EXPECT_EQ(third[1].at("content").as_array()[0].at("text"), "answer 2");
  EXPECT_EQ(third[2].at("content").as_array()[0].at("text"), "question 3");

  server->restart();
  auto thread = get_thread(id);
  ASSERT_EQ(thread.at("messages").as_array().size(), 6u) << "every turn is still stored";
  EXPECT_EQ(thread.at("messages").as_array()[0].at("content"), "question 1");
  upstream->push_message(U::message({U::text_block("answer 4")}, "end_turn"));
  json(post_message(id, {{"content", "question 4"}}));
  const auto last = sent().back();
  const auto& after = last.at("messages").as_array();
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[0].at("content").as_array()[0].at("text"), "question 3")
      << "the history came back from the store";
}

TEST_F(WorkspaceTest, DeletingAThreadRemovesItsContainerAndFiles) {
  const std::string id = create_thread();
  fs::path file = server->dir() / "data.csv";
  std::ofstream(file) << "x,y\n1,2\n";
  auto uploaded =
      server->curl_json("-X POST '" + thread_url(id, "/upload-file") + "' -F 'file=@" + file.string() + "'");
  EXPECT_EQ(uploaded.at("filename"), "data.csv");
  EXPECT_EQ(server->status("'" + server->base() + "/containers/" + id + "'"), 200);
  auto deleted = server->curl_json("-X DELETE '" + thread_url(id) + "'");
  EXPECT_EQ(deleted.at("type"), "thread_deleted");
  EXPECT_EQ(server->status("'" + thread_url(id) + "'"), 404);
  EXPECT_EQ(server->status("'" + server->base() + "/containers/" + id + "'"), 404)
      << "the container went with it";
  EXPECT_EQ(server->status("'" + server->base() + "/files?scope_id=" + id + "'"), 404);
}

TEST_F(WorkspaceTest, TheWebPageIsServedSafely) {
  std::string headers = sh("curl -sS -D - -o /dev/null '" + server->url("/") + "'");
  EXPECT_NE(headers.find("200"), std::string::npos) << headers;
  EXPECT_NE(headers.find("text/html; charset=utf-8"), std::string::npos) << headers;
  EXPECT_NE(headers.find("X-Content-Type-Options: nosniff"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Content-Security-Policy: default-src 'none'; script-src 'self'"), std::string::npos)
      << headers;
  EXPECT_NE(sh("curl -sS '" + server->url("/") + "'").find("<script type=\"module\" src=\"/assets/app.js\">"),
            std::string::npos);
  std::string js = sh("curl -sS -D - -o /dev/null '" + server->url("/assets/app.js") + "'");
  EXPECT_NE(js.find("text/javascript"), std::string::npos) << js;
  for (std::string path : {"/assets/../index.html", "/assets/%2e%2e/index.html", "/assets/..%2fsandboxd.db",
                           "/assets/.hidden.js", "/assets/app.js%00.css", "/assets/missing.js",
                           "/assets/%2e%2e/%2e%2e/tests/workspace_test.cc", "/assets//app.js"}) {
    int status =
        std::stoi(sh("curl -s --path-as-is -o /dev/null -w '%{http_code}' '" + server->url(path) + "'"));
    EXPECT_EQ(status, 404) << path;
  }
}

// features.codeExecution.enabled false (a SIGHUP applies it): code execution is removed
// even when asked for and when a Skill would add it; chat goes on, and earlier steps
// stay out of the history the model gets.
TEST_F(WorkspaceTest, TheFlagRemovesCodeExecutionAndChatStillAnswers) {
  const std::string id = create_thread();
  upstream->push_message(
      U::message({U::tool_use("toolu_e", "bash_code_execution", {{"command", "echo 7"}})}, "tool_use"));
  upstream->push_message(U::message({U::text_block("It printed 7.")}, "end_turn"));
  json(post_message(id, {{"content", "Run echo 7"}, {"pgpt", {{"tools", bj::array{"code_execution"}}}}}));

  server->write_config(model_yaml(*upstream) + "workspace:\n  maxHistoryTurns: 2\n" +
                       "features:\n  codeExecution:\n    enabled: false\n");
  EXPECT_NE(server->reload().find("reloaded"), std::string::npos);
  auto features = server->curl_json("'" + server->url("/api/v1/app/features") + "'");
  EXPECT_EQ(features.at("code_execution").at("enabled"), false);

  upstream->push_message(U::message({U::text_block("I can't run code here, but 7 is 7.")}, "end_turn"));
  auto reply =
      json(post_message(id, {{"content", "Again, with code"},
                             {"pgpt", {{"tools", bj::array{"code_execution"}}}},
                             {"skills", bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "xlsx"}}}}}))
          .as_object();
  EXPECT_EQ(reply.at("content").as_array()[0].at("text"), "I can't run code here, but 7 is 7.");
  auto calls = sent();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_FALSE(calls[2].contains("tools")) << "removed, though asked for and though a Skill would add it";
  for (const auto& message : calls[2].at("messages").as_array()) {
    if (!message.at("content").is_array()) continue;
    for (const auto& block : message.at("content").as_array())
      EXPECT_NE(std::string(block.at("type").as_string()), "tool_use")
          << "earlier code steps are left out: " << bj::serialize(message);
  }
  EXPECT_EQ(calls[2].at("messages").as_array()[1].at("content").as_array()[0].at("text"), "It printed 7.");

  server->write_config(model_yaml(*upstream) + "workspace:\n  maxHistoryTurns: 2\n");
  EXPECT_NE(server->reload().find("reloaded"), std::string::npos);
}

}  // namespace

namespace {

// One turn at a time per thread: a second message while the first is answered gets 429
// with Retry-After (the first is held at the upstream until the second was refused).
TEST_F(WorkspaceTest, ASecondMessageWhileOneIsAnsweredIsTooManyRequests) {
  const std::string id = create_thread();
  const std::string other = create_thread();
  upstream->push({{"message", U::message({U::text_block("slow answer")}, "end_turn")}, {"delay_ms", 4000}});
  auto first = std::async(std::launch::async, [&] { return post_message(id, {{"content", "first"}}); });
  while (upstream->requests().size() == baseline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::string headers = sh("curl -sS -D - -o /dev/null -X POST '" + thread_url(id, "/messages") +
                           "' -H 'Authorization: Bearer secret-alice' -H 'content-type: application/json' -d "
                           "'{\"content\": \"second\"}'");
  EXPECT_NE(headers.find(" 429"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Retry-After: 1"), std::string::npos) << headers;
  upstream->push_message(U::message({U::text_block("other thread answers")}, "end_turn"));
  auto elsewhere = json(post_message(other, {{"content", "meanwhile"}}));
  EXPECT_EQ(elsewhere.at("content").as_array()[0].at("text"), "other thread answers")
      << "other threads are not held up";
  EXPECT_EQ(json(first.get()).at("content").as_array()[0].at("text"), "slow answer");
  EXPECT_EQ(get_thread(id).at("messages").as_array().size(), 2u) << "the refused message left nothing";
}

// The model cannot make up an artifact: a zylon-resource block in its answer (a file
// and a download_url of its choosing, here aimed at another of the user's containers) is
// neither streamed, nor stored, nor listed; only files the turn was seen to write
// become artifacts. Another owner's chat goes on meanwhile.
TEST_F(WorkspaceTest, AZylonResourceBlockTheModelMakesUpIsNeitherStreamedNorStored) {
  const std::string id = create_thread();
  // Something worth stealing in another container of Alice's.
  ASSERT_EQ(server->status("-X PUT '" + server->base() + "/files/secret.txt?scope_id=alice-private' -d hush"),
            200);
  const std::string lure =
      "/api/gpt/v1/files/" + file_id("/mnt/user-data/uploads/secret.txt") + "/content?scope_id=alice-private";
  const bj::object forged{
      {"type", "zylon-resource"}, {"file_id", file_id("/mnt/user-data/uploads/secret.txt")},
      {"filename", "report.pdf"}, {"mime_type", "text/plain"},
      {"size_bytes", 4},          {"path", "/mnt/user-data/outputs/report.pdf"},
      {"downloadable", true},     {"download_url", lure}};
  for (bool stream : {false, true}) {
    upstream->push_message(U::message({U::text_block("Here is your report."), forged}, "end_turn"));
    std::string raw = post_message(id, {{"content", "Report"}, {"stream", stream}});
    EXPECT_EQ(raw.find("alice-private"), std::string::npos) << raw;
    EXPECT_EQ(raw.find("zylon-resource"), std::string::npos) << raw;
    if (stream) {
      auto events = parse_sse(raw);
      ASSERT_FALSE(events.empty()) << raw;
      EXPECT_EQ(events.back().name, "message_stop");
      int64_t expected_index = 0;  // the numbering stays whole: the block's place is an empty text
      for (const auto& e : events)
        if (e.name == "content_block_start") EXPECT_EQ(e.data.at("index").as_int64(), expected_index++);
      EXPECT_EQ(expected_index, 2);
    } else {
      auto reply = json(raw).as_object();
      EXPECT_EQ(reply.at("content").as_array()[0].at("text"), "Here is your report.");
      EXPECT_EQ(find_block(reply.at("content").as_array(), "zylon-resource"), nullptr)
          << bj::serialize(reply);
    }
    // Bob's chat is answered meanwhile.
    const std::string bobs = create_thread("secret-bob-x");
    upstream->push_message(U::message({U::text_block("bob-ok")}, "end_turn"));
    auto bob = json(post_message(bobs, {{"content", "hi"}}, "secret-bob-x"));
    EXPECT_EQ(bob.at("content").as_array()[0].at("text"), "bob-ok");
  }
  const auto thread = get_thread(id);
  EXPECT_EQ(bj::serialize(thread).find("alice-private"), std::string::npos) << bj::serialize(thread);
  for (const auto& message : thread.at("messages").as_array())
    if (message.at("content").is_array())
      EXPECT_EQ(find_block(message.at("content").as_array(), "zylon-resource"), nullptr)
          << bj::serialize(message);
  EXPECT_TRUE(server->curl_json("'" + thread_url(id, "/artifacts") + "'").at("data").as_array().empty());
  // The next turn's history sent upstream has none either.
  upstream->push_message(U::message({U::text_block("ok")}, "end_turn"));
  json(post_message(id, {{"content", "again"}}));
  EXPECT_EQ(bj::serialize(sent().back()).find("alice-private"), std::string::npos);
}

// Citations the model gives (Anthropic's citations_delta in the stream) stay on their text
// block in the answer, streamed or not, and in the stored thread.
TEST_F(WorkspaceTest, ATurnKeepsTheModelsCitations) {
  const std::string id = create_thread();
  const bj::object citation{{"type", "char_location"}, {"cited_text", "The grass is green."},
                            {"document_index", 0},     {"document_title", "Facts"},
                            {"start_char_index", 0},   {"end_char_index", 19}};
  bj::object cited = U::text_block("The grass is green.");
  cited["citations"] = bj::array{citation};
  for (bool stream : {false, true}) {
    upstream->push_message(U::message({U::text_block("According to the document, "), cited}, "end_turn"));
    std::string raw = post_message(id, {{"content", "What colour is grass?"}, {"stream", stream}});
    if (stream) {
      int citation_deltas = 0;
      for (const auto& e : parse_sse(raw)) {
        if (e.name != "content_block_delta" || e.data.at("delta").at("type") != "citations_delta") continue;
        EXPECT_EQ(e.data.at("delta").at("citation"), citation);
        ++citation_deltas;
      }
      EXPECT_EQ(citation_deltas, 1) << raw;
    } else {
      const auto reply = json(raw);
      const auto& content = reply.at("content").as_array();
      ASSERT_EQ(content.size(), 2u) << raw;
      EXPECT_EQ(content[1].at("citations"), bj::array{citation}) << raw;
    }
  }
  const auto thread = get_thread(id);
  int stored = 0;
  for (const auto& message : thread.at("messages").as_array()) {
    if (message.at("role") != "assistant") continue;
    const auto& content = message.at("content").as_array();
    ASSERT_EQ(content.size(), 2u) << bj::serialize(message);
    EXPECT_EQ(content[1].at("text"), "The grass is green.");
    EXPECT_EQ(content[1].at("citations"), bj::array{citation}) << bj::serialize(message);
    ++stored;
  }
  EXPECT_EQ(stored, 2);
}

// The organisation's download settings hold whichever door reaches a thread's container:
// with generatedResources (and uploadedResources) off, the Files API refuses the thread's
// files as the thread's download-file does, and says downloadable: false; a container that
// is no thread's keeps the Files API's own rule.
TEST_F(WorkspaceTest, TheOrganisationsDownloadSettingsHoldThroughTheFilesApiToo) {
  const std::string id = create_thread();
  const std::string bash = "-X POST '" + server->base() + "/containers/";
  const std::string write =
      "/tools/bash_code_execution' -d '{\"command\": \"echo '\"'\"'<b>x</b>'\"'\"' > "
      "/mnt/user-data/outputs/x.html\"}'";
  ASSERT_EQ(server->curl_json(bash + id + write).at("return_code"), 0);
  ASSERT_EQ(server->curl_json(bash + "alice-plain" + write).at("return_code"), 0);
  ASSERT_EQ(server->status("-X PUT '" + thread_url(id, "/put-file/in.txt") + "' -d mine"), 200);
  const std::string output = file_id("/mnt/user-data/outputs/x.html"),
                    upload = file_id("/mnt/user-data/uploads/in.txt");
  auto files_url = [&](const std::string& scope, const std::string& rest) {
    return "'" + server->base() + "/files" + rest + (rest.find('?') == std::string::npos ? "?" : "&") +
           "scope_id=" + scope + "'";
  };
  auto listed_downloadable = [&](const std::string& scope) {
    std::map<std::string, bool> out;
    const auto listing = server->curl_json(files_url(scope, ""));
    for (const auto& f : listing.at("data").as_array())
      out[std::string(f.at("id").as_string())] = f.at("downloadable").as_bool();
    return out;
  };
  // Allowed by the settings (generated files on, uploaded off by default).
  EXPECT_EQ(server->status(files_url(id, "/" + output + "/content")), 200);
  EXPECT_EQ(server->status(files_url(id, "/" + upload + "/content")), 403);
  EXPECT_EQ(listed_downloadable(id)[upload], false);

  server->write_config(model_yaml(*upstream) +
                       "workspace:\n  maxHistoryTurns: 2\n  downloads:\n"
                       "    generatedResources: false\n    uploadedResources: false\n");
  ASSERT_NE(server->reload().find("reloaded"), std::string::npos);
  EXPECT_EQ(server->status("'" + thread_url(id, "/download-file?path=/mnt/user-data/outputs/x.html") + "'"),
            403);
  const std::string refused = server->curl("-i " + files_url(id, "/" + output + "/content"));
  EXPECT_NE(refused.find(" 403"), std::string::npos) << refused;
  EXPECT_NE(refused.find("\"permission_error\""), std::string::npos) << refused;
  EXPECT_EQ(refused.find("<b>x</b>"), std::string::npos) << refused;
  EXPECT_EQ(server->status(files_url(id, "/" + output + "/content") + " -H 'Range: bytes=0-1'"), 403);
  EXPECT_EQ(server->status(files_url(id, "/" + upload + "/content")), 403);
  auto listed = listed_downloadable(id);
  EXPECT_EQ(listed[output], false);
  EXPECT_EQ(listed[upload], false);
  EXPECT_EQ(server->curl_json(files_url(id, "/" + output)).at("downloadable"), false);
  EXPECT_NE(server->curl("-I " + files_url(id, "/" + output)).find("X-File-Downloadable: false"),
            std::string::npos);
  // The artifacts' view agrees (none here: written by a plain command, not a turn).
  // A container that is no thread's: the Files API's rule, outputs downloadable.
  EXPECT_EQ(server->curl(files_url("alice-plain", "/" + output + "/content")), "<b>x</b>\n");
  EXPECT_EQ(listed_downloadable("alice-plain")[output], true);

  // Uploaded files on, generated still off: each door says the same.
  server->write_config(model_yaml(*upstream) +
                       "workspace:\n  maxHistoryTurns: 2\n  downloads:\n"
                       "    generatedResources: false\n    uploadedResources: true\n");
  ASSERT_NE(server->reload().find("reloaded"), std::string::npos);
  EXPECT_EQ(server->curl(files_url(id, "/" + upload + "/content")), "mine");
  EXPECT_EQ(server->curl("'" + thread_url(id, "/download-file?path=/mnt/user-data/uploads/in.txt") + "'"),
            "mine");
  EXPECT_EQ(listed_downloadable(id)[upload], true);
  EXPECT_EQ(server->status(files_url(id, "/" + output + "/content")), 403);

  server->write_config(model_yaml(*upstream) + "workspace:\n  maxHistoryTurns: 2\n");
  EXPECT_NE(server->reload().find("reloaded"), std::string::npos);
  server->curl("-X DELETE '" + server->base() + "/containers/alice-plain'");
}

}  // namespace

namespace {

std::vector<std::string> listed_ids(const bj::value& page) {
  std::vector<std::string> ids;
  for (const auto& t : page.at("data").as_array()) ids.emplace_back(t.at("id").as_string());
  return ids;
}

// `q` keeps the threads whose title holds it, ignoring case, with LIKE's wildcards
// taken literally; it pages like the plain list, follows renames and deletes, and
// never finds another owner's threads.
TEST_F(WorkspaceTest, ThreadsAreSearchedByTitle) {
  auto make = [&](const std::string& title) {
    return std::string(server
                           ->curl_json("-X POST '" + server->url("/api/v1/app/thread") +
                                       "' -d '{\"title\": \"" + title + "\"}'")
                           .at("id")
                           .as_string());
  };
  const std::string sales = make("Srch Zq3 sales"), budget = make("srch zq3 budget"),
                    plan = make("Srch 100%_plan"), plain = make("Srch 100 plan"), other = make("Unrelated");
  auto search = [&](const std::string& query, const std::string& token = "secret-alice") {
    return listed_ids(server->curl_json("'" + server->url("/api/v1/app/thread?q=" + query) + "'", token));
  };
  EXPECT_EQ(search("zq3"), (std::vector<std::string>{budget, sales})) << "ignoring case, newest first";
  EXPECT_EQ(search("SRCH%20ZQ3%20S"), (std::vector<std::string>{sales}));
  EXPECT_EQ(search("100%25_"), (std::vector<std::string>{plan})) << "% and _ are literal";
  EXPECT_EQ(search("srch").size(), 4u);
  EXPECT_TRUE(search("nothing-like-this").empty());
  auto page = server->curl_json("'" + server->url("/api/v1/app/thread?q=zq3&limit=1") + "'");
  EXPECT_EQ(listed_ids(page), (std::vector<std::string>{budget}));
  EXPECT_EQ(page.at("has_more"), true);
  auto rest =
      server->curl_json("'" + server->url("/api/v1/app/thread?q=zq3&limit=1&after_id=" + budget) + "'");
  EXPECT_EQ(listed_ids(rest), (std::vector<std::string>{sales}));
  EXPECT_EQ(rest.at("has_more"), false);

  server->curl_json("-X PATCH '" + thread_url(other) + "' -d '{\"title\": \"Now about ZQ3\"}'");
  EXPECT_EQ(search("zq3"), (std::vector<std::string>{other, budget, sales}))
      << "a rename is found by its new title";
  server->curl_json("-X DELETE '" + thread_url(budget) + "'");
  EXPECT_EQ(search("zq3"), (std::vector<std::string>{other, sales})) << "a deleted thread is not";
  EXPECT_TRUE(search("zq3", "secret-bob-x").empty()) << "another owner's threads are never found";
  EXPECT_EQ(server->status("'" + server->url("/api/v1/app/thread?q=" + std::string(201, 'a')) + "'"), 400);
  EXPECT_EQ(server->status("'" + server->url("/api/v1/app/thread?q=%ff") + "'"), 400);
  (void)plain;
}

// The command of the turn: it says it started (stdout and a file), then sleeps; the
// file it would write at the end must never appear.
const char* kLongCommand =
    "echo started; echo yes > /mnt/user-data/outputs/started.txt; sleep 37; echo late > "
    "/mnt/user-data/outputs/too-late.txt";

// Processes of the sandbox whose command line is `sleep 37` (the pattern's brackets keep
// the checking command itself out).
const char* kCountSleepers =
    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 3[7]'";

class WorkspaceStopTest : public WorkspaceTest {
 protected:
  bool started(const std::string& id) {
    auto files = server->curl_json("'" + thread_url(id, "/files") + "'");
    for (const auto& f : files.at("data").as_array())
      if (f.at("filename") == "started.txt") return true;
    return false;
  }
  void wait_started(const std::string& id) {
    for (int i = 0; i < 600 && !started(id); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(started(id)) << "the command never started";
  }
  // A later command in the same sandbox: how many `sleep 37` run, and whether the
  // stopped command's last file exists.
  std::string check_sandbox(const std::string& id) {
    upstream->push_message(
        U::message({U::tool_use("toolu_check", "bash_code_execution",
                                {{"command", std::string(kCountSleepers) + "; ls /mnt/user-data/outputs/"}})},
                   "tool_use"));
    upstream->push_message(U::message({U::text_block("Checked.")}, "end_turn"));
    auto reply =
        json(post_message(id, {{"content", "check"}, {"pgpt", {{"tools", bj::array{"code_execution"}}}}}));
    const auto* result = find_block(reply.at("content").as_array(), "bash_code_execution_tool_result");
    return result ? std::string(result->at("content").at("stdout").as_string()) : "";
  }
};

// POST .../stop during a command: the command is killed in the sandbox, the open stream
// ends as a finished one (message_delta marked stopped, message_stop), and what was
// said so far is stored, marked stopped; the output came as execution_output events
// while it ran.
TEST_F(WorkspaceStopTest, StoppingATurnKillsItsCommandAndStoresWhatWasSaid) {
  const std::string id = create_thread();
  upstream->push_message(
      U::message({U::text_block("Running the long job."),
                  U::tool_use("toolu_long", "bash_code_execution", {{"command", kLongCommand}})},
                 "tool_use"));
  auto stream = std::async(std::launch::async, [&] {
    return post_message(id, {{"content", "Run the long job"},
                             {"stream", true},
                             {"pgpt", {{"tools", bj::array{"code_execution"}}}}});
  });
  wait_started(id);
  auto stopped = server->curl_json("-X POST '" + thread_url(id, "/stop") + "'");
  EXPECT_EQ(stopped.at("type"), "thread_turn_stop");
  EXPECT_EQ(stopped.at("stopped"), true);
  ASSERT_EQ(stream.wait_for(std::chrono::seconds(25)), std::future_status::ready)
      << "the stream ended with the stop";
  auto events = parse_sse(stream.get());
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back().name, "message_stop");
  const auto& delta = events[events.size() - 2];
  ASSERT_EQ(delta.name, "message_delta");
  EXPECT_EQ(delta.data.at("delta").at("stopped"), true);
  std::string step_id, output;
  for (const auto& e : events) {
    if (e.name == "content_block_start" && e.data.at("content_block").at("type") == "server_tool_use")
      step_id = std::string(e.data.at("content_block").at("id").as_string());
    if (e.name == "execution_output") {
      EXPECT_EQ(e.data.at("tool_use_id"), bj::value(step_id)) << "the output names its step";
      EXPECT_EQ(e.data.at("stream"), "stdout");
      output += std::string(e.data.at("text").as_string());
    }
  }
  EXPECT_EQ(output, "started\n") << "the output came while the command ran";

  const auto thread = get_thread(id);
  const auto& messages = thread.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u);
  const auto& answer = messages[1].as_object();
  EXPECT_EQ(answer.at("stopped"), true);
  EXPECT_EQ(block_types(answer.at("content").as_array()),
            (std::vector<std::string>{"text", "server_tool_use", "bash_code_execution_tool_result",
                                      "zylon-resource"}))
      << bj::serialize(answer);
  EXPECT_EQ(answer.at("content").as_array()[0].at("text"), "Running the long job.");
  EXPECT_EQ(find_block(answer.at("content").as_array(), "zylon-resource")->at("filename"), "started.txt");

  // The thread takes its next message, and the command is gone from the sandbox.
  const std::string seen = check_sandbox(id);
  EXPECT_EQ(seen.substr(0, seen.find('\n')), "0") << "no `sleep 37` runs any more: " << seen;
  EXPECT_NE(seen.find("started.txt"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("too-late.txt"), std::string::npos) << "the rest of the command never ran: " << seen;
  // The stopped turn goes back to the model as it was stored: its step with its result.
  auto calls = sent();
  ASSERT_EQ(calls.size(), 3u);
  const auto& history = calls[1].at("messages").as_array();
  ASSERT_GE(history.size(), 2u);
  EXPECT_EQ(history[1].at("role"), "assistant");
}

// Closing the stream (what the page does) stops the turn the same way.
TEST_F(WorkspaceStopTest, ClosingTheStreamStopsTheTurn) {
  const std::string id = create_thread();
  upstream->push_message(U::message(
      {U::tool_use("toolu_long2", "bash_code_execution", {{"command", kLongCommand}})}, "tool_use"));
  auto stream = std::async(std::launch::async, [&] {
    return sh(
        "curl -sS -N --max-time 600 -H 'Authorization: Bearer secret-alice' -X POST '" +
        thread_url(id, "/messages") + "' -H 'content-type: application/json' --data-binary @" +
        body_file(
            {{"content", "Run it"}, {"stream", true}, {"pgpt", {{"tools", bj::array{"code_execution"}}}}}) +
        " & echo $! > " + (server->dir() / "curl.pid").string() + "; wait");
  });
  wait_started(id);
  sh("kill $(cat " + (server->dir() / "curl.pid").string() + ")");
  stream.get();
  bool stored = false;
  for (int i = 0; i < 400 && !stored; ++i) {
    stored = get_thread(id).at("messages").as_array().size() == 2;
    if (!stored) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(stored) << "the stopped turn was stored";
  EXPECT_EQ(get_thread(id).at("messages").as_array()[1].at("stopped"), true);
  const std::string seen = check_sandbox(id);
  EXPECT_EQ(seen.substr(0, seen.find('\n')), "0") << seen;
  EXPECT_EQ(seen.find("too-late.txt"), std::string::npos) << seen;
}

TEST_F(WorkspaceTest, StopWithNoTurnRunningAndForOthers) {
  const std::string id = create_thread();
  auto idle = server->curl_json("-X POST '" + thread_url(id, "/stop") + "'");
  EXPECT_EQ(idle.at("stopped"), false);
  EXPECT_EQ(server->status("-X POST '" + thread_url(id, "/stop") + "'", "secret-bob-x"), 404);
  EXPECT_EQ(server->status("-X POST '" + thread_url("thread_missing", "/stop") + "'"), 404);
  EXPECT_EQ(server->status("'" + thread_url(id, "/files") + "'", "secret-bob-x"), 404);
}

// The files list: uploads and outputs with their kind, size and the organisation's
// download setting; another owner gets 404.
TEST_F(WorkspaceTest, TheFilesListHoldsUploadsAndOutputs) {
  const std::string id = create_thread();
  EXPECT_TRUE(server->curl_json("'" + thread_url(id, "/files") + "'").at("data").as_array().empty());
  fs::path file = server->dir() / "in.csv";
  std::ofstream(file) << "a\n1\n";
  server->curl_json("-X POST '" + thread_url(id, "/upload-file") + "' -F 'file=@" + file.string() + "'");
  upstream->push_message(
      U::message({U::tool_use("toolu_f", "bash_code_execution",
                              {{"command", "printf abc > /mnt/user-data/outputs/out.txt"}})},
                 "tool_use"));
  upstream->push_message(U::message({U::text_block("Done.")}, "end_turn"));
  json(post_message(id, {{"content", "write"}, {"pgpt", {{"tools", bj::array{"code_execution"}}}}}));
  auto files = server->curl_json("'" + thread_url(id, "/files") + "'").at("data").as_array();
  std::map<std::string, bj::object> by_name;
  for (const auto& f : files) by_name[std::string(f.at("filename").as_string())] = f.as_object();
  ASSERT_EQ(by_name.size(), 2u) << bj::serialize(files);
  EXPECT_EQ(by_name["in.csv"].at("kind"), "upload");
  EXPECT_EQ(by_name["in.csv"].at("size_bytes"), 4);
  EXPECT_EQ(by_name["out.txt"].at("kind"), "output");
  EXPECT_EQ(by_name["out.txt"].at("size_bytes"), 3);
  EXPECT_EQ(by_name["out.txt"].at("path"), "/mnt/user-data/outputs/out.txt");
  EXPECT_EQ(by_name["out.txt"].at("downloadable"), true);
  const std::string file_id =
      sh("printf %s /mnt/user-data/outputs/out.txt | base64 -w0 | tr '+/' '-_' | tr -d '='");
  EXPECT_EQ(by_name["out.txt"].at("file_id"), bj::value(file_id)) << "the Files API's id of the path";
}

}  // namespace
