// /messages end to end: a real `sandboxd serve` on loopback drives a scripted upstream
// model (the real Messages protocol over HTTP, JSON and SSE) and runs every sub-tool
// call in a real sandbox. Checks what the client gets and what the upstream receives.

#include <gtest/gtest.h>

#include <future>
#include <list>

#include "eventually.h"
#include "scripted_upstream.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

std::string model_yaml(const ScriptedUpstream& upstream, const std::string& extra = "") {
  return "model:\n  baseUrl: \"" + upstream.base_url() +
         "\"\n  apiKey: upstream-key\n  models: { default: upstream-model }\n  maxToolIterations: 3\n"
         "  timeoutSec: 4\n  pingIntervalSec: 1\n  toolResultTimeoutSec: 5\n" +
         extra;
}

// Rebuilds the message from its events the way an SDK does.
bj::object reassemble(const std::vector<SseEvent>& events) {
  bj::object message;
  std::map<int64_t, std::string> partial;
  for (const auto& e : events) {
    if (e.name == "message_start") message = e.data.at("message").as_object();
    if (e.name == "content_block_start") {
      auto& content = message["content"].as_array();
      EXPECT_EQ(e.data.at("index").as_int64(), static_cast<int64_t>(content.size()))
          << "indices run in order";
      content.push_back(e.data.at("content_block"));
    }
    if (e.name == "content_block_delta") {
      auto& block = message["content"].as_array().at(e.data.at("index").as_int64()).as_object();
      const auto& delta = e.data.at("delta").as_object();
      if (delta.at("type") == "text_delta")
        block["text"] = std::string(block["text"].as_string()) + std::string(delta.at("text").as_string());
      if (delta.at("type") == "input_json_delta")
        partial[e.data.at("index").as_int64()] += delta.at("partial_json").as_string();
    }
    if (e.name == "content_block_stop") {
      auto index = e.data.at("index").as_int64();
      if (partial.count(index))
        message["content"].as_array().at(index).as_object()["input"] = json(partial[index]);
    }
    if (e.name == "message_delta") {
      for (const auto& [k, v] : e.data.at("delta").as_object()) message[k] = v;
      message["usage"] = e.data.at("usage");
    }
  }
  return message;
}

class MessagesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    upstream = new ScriptedUpstream();
    server = new ServerProcess(model_yaml(*upstream));
  }
  static void TearDownTestSuite() {
    delete server;
    delete upstream;
  }
  void SetUp() override {
    container = std::string("m-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    baseline = upstream->requests().size();
  }
  void TearDown() override { EXPECT_EQ(upstream->pending_steps(), 0u) << "every scripted step was used"; }

  // The upstream requests made by this test (kept alive for the test's references).
  const std::vector<bj::object>& sent() {
    auto all = upstream->requests();
    snapshots.emplace_back(all.begin() + static_cast<long>(baseline), all.end());
    return snapshots.back();
  }
  bj::object request(const std::string& user_text, bj::value tools = nullptr) {
    bj::object body{{"model", "default"},
                    {"max_tokens", 1024},
                    {"container", container},
                    {"messages", bj::array{bj::object{{"role", "user"}, {"content", user_text}}}}};
    body["tools"] = tools.is_null()
                        ? bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_v1"}}}
                        : tools;
    return body;
  }
  std::string post(const bj::object& body, const std::string& extra = "",
                   const std::string& path = "/messages") {
    fs::path file = server->dir() / ("body-" + std::to_string(++posts) + ".json");
    std::ofstream(file) << bj::serialize(body);
    return server->curl("-X POST '" + server->base() + path + "' -H 'content-type: application/json' " +
                        extra + " --data-binary @" + file.string());
  }
  int post_status(const bj::object& body, const std::string& path = "/messages") {
    fs::path file = server->dir() / ("body-" + std::to_string(++posts) + ".json");
    std::ofstream(file) << bj::serialize(body);
    return server->status("-X POST '" + server->base() + path +
                          "' -H 'content-type: application/json' --data-binary @" + file.string());
  }
  bj::object post_json(const bj::object& body) { return json(post(body)).as_object(); }

  static ScriptedUpstream* upstream;
  static ServerProcess* server;
  std::string container;
  size_t baseline = 0;
  int posts = 0;
  std::list<std::vector<bj::object>> snapshots;
};
ScriptedUpstream* MessagesTest::upstream = nullptr;
ServerProcess* MessagesTest::server = nullptr;

using U = ScriptedUpstream;

TEST_F(MessagesTest, ASingleBashCallRunsInTheContainerAndIsFedBack) {
  upstream->push_message(
      U::message({U::text_block("Let me compute."),
                  U::tool_use("toolu_01A", "bash_code_execution", {{"command", "echo $((6*7))"}})},
                 "tool_use", 100, 20));
  upstream->push_message(U::message({U::text_block("The answer is 42.")}, "end_turn", 150, 8));
  auto reply = post_json(request("What is 6*7? Run code."));

  EXPECT_TRUE(std::string(reply.at("id").as_string()).starts_with("msg_"));
  EXPECT_EQ(reply.at("type"), "message");
  EXPECT_EQ(reply.at("role"), "assistant");
  EXPECT_EQ(reply.at("model"), "default") << "the model as requested";
  EXPECT_EQ(reply.at("stop_reason"), "end_turn");
  const auto& content = reply.at("content").as_array();
  ASSERT_EQ(content.size(), 4u) << bj::serialize(reply);
  EXPECT_EQ(content[0].at("type"), "text");
  const auto& use = content[1].as_object();
  EXPECT_EQ(use.at("type"), "server_tool_use");
  EXPECT_EQ(use.at("id"), "srvtoolu_01A");
  EXPECT_EQ(use.at("name"), "bash_code_execution");
  EXPECT_EQ(use.at("input").at("command"), "echo $((6*7))");
  const auto& result = content[2].as_object();
  EXPECT_EQ(result.at("type"), "bash_code_execution_tool_result");
  EXPECT_EQ(result.at("tool_use_id"), "srvtoolu_01A");
  EXPECT_EQ(
      result.at("content"),
      json(
          R"({"type":"bash_code_execution_result","stdout":"42\n","stderr":"","return_code":0,"content":[]})"));
  EXPECT_EQ(content[3].at("text"), "The answer is 42.");
  EXPECT_EQ(reply.at("usage").at("input_tokens"), 250);
  EXPECT_EQ(reply.at("usage").at("output_tokens"), 28);
  EXPECT_EQ(reply.at("usage").at("server_tool_use").at("code_execution_requests"), 1);
  EXPECT_EQ(reply.at("container").at("id").as_string(), container);
  EXPECT_TRUE(std::string(reply.at("container").at("expires_at").as_string()).ends_with("Z"));

  auto calls = sent();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].at("_path"), "/v1/messages");
  EXPECT_EQ(calls[0].at("model"), "upstream-model") << "'default' maps through model.models";
  EXPECT_FALSE(calls[0].contains("container"));
  const auto& tools = calls[0].at("tools").as_array();
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].at("name"), "bash_code_execution");
  EXPECT_EQ(tools[0].at("input_schema").at("required"), json(R"(["command"])"));
  EXPECT_NE(std::string(tools[0].at("description").as_string()).find("/mnt/user-data/outputs/"),
            std::string::npos);
  EXPECT_EQ(tools[1].at("name"), "text_editor_code_execution");
  // The second call carries the model's turn and the result, as tool_use/tool_result.
  const auto& history = calls[1].at("messages").as_array();
  ASSERT_EQ(history.size(), 3u) << bj::serialize(history);
  EXPECT_EQ(history[1].at("role"), "assistant");
  EXPECT_EQ(history[1].at("content").as_array()[1].at("type"), "tool_use");
  EXPECT_EQ(history[1].at("content").as_array()[1].at("id"), "toolu_01A");
  const auto& fed = history[2].at("content").as_array()[0].as_object();
  EXPECT_EQ(fed.at("type"), "tool_result");
  EXPECT_EQ(fed.at("tool_use_id"), "toolu_01A");
  EXPECT_NE(std::string(fed.at("content").as_string()).find("42\\n"), std::string::npos)
      << bj::serialize(fed);
}

TEST_F(MessagesTest, EditorThenBashAndTheOutputIsDownloadable) {
  upstream->push_message(U::message({U::tool_use("toolu_e1", "text_editor_code_execution",
                                                 {{"command", "create"},
                                                  {"path", "/mnt/user-data/outputs/report.txt"},
                                                  {"file_text", "alpha\nbeta\n"}})},
                                    "tool_use"));
  upstream->push_message(U::message({U::tool_use("toolu_b1", "bash_code_execution",
                                                 {{"command", "wc -l < /mnt/user-data/outputs/report.txt"}})},
                                    "tool_use"));
  upstream->push_message(U::message({U::text_block("Saved.")}, "end_turn"));
  auto reply = post_json(request("Write a report"));
  const auto& content = reply.at("content").as_array();
  ASSERT_EQ(content.size(), 5u) << bj::serialize(reply);
  EXPECT_EQ(content[1].at("type"), "text_editor_code_execution_tool_result");
  EXPECT_EQ(content[1].at("content").at("type"), "text_editor_code_execution_create_result");
  EXPECT_EQ(content[1].at("content").at("is_file_update"), false);
  EXPECT_EQ(content[3].at("content").at("stdout"), "2\n");
  EXPECT_EQ(reply.at("usage").at("server_tool_use").at("code_execution_requests"), 2);
  // The file is an output: listed, downloadable, with the content the editor wrote.
  auto listing = server->curl_json("'" + server->base() + "/files?scope_id=" + container + "'");
  ASSERT_EQ(listing.at("data").as_array().size(), 1u);
  EXPECT_EQ(listing.at("data").as_array()[0].at("downloadable"), true);
  std::string id(listing.at("data").as_array()[0].at("id").as_string());
  EXPECT_EQ(server->curl("'" + server->base() + "/files/" + id + "/content?scope_id=" + container + "'"),
            "alpha\nbeta\n");
}

TEST_F(MessagesTest, SeveralCallsInOneTurnAllRunInOrder) {
  upstream->push_message(
      U::message({U::tool_use("toolu_1", "bash_code_execution", {{"command", "echo one > f"}}),
                  U::tool_use("toolu_2", "bash_code_execution", {{"command", "echo two >> f; cat f"}}),
                  U::tool_use("toolu_3", "text_editor_code_execution", {{"command", "view"}, {"path", "f"}})},
                 "tool_use"));
  upstream->push_message(U::message({U::text_block("ok")}, "end_turn"));
  auto reply = post_json(request("three things"));
  const auto& content = reply.at("content").as_array();
  ASSERT_EQ(content.size(), 7u) << bj::serialize(reply);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(content[i].at("type"), "server_tool_use");
  EXPECT_EQ(content[3].at("tool_use_id"), "srvtoolu_1");
  EXPECT_EQ(content[4].at("tool_use_id"), "srvtoolu_2");
  EXPECT_EQ(content[4].at("content").at("stdout"), "one\ntwo\n") << "the calls ran in order";
  EXPECT_EQ(content[5].at("content").at("content"), "one\ntwo");
  EXPECT_EQ(reply.at("usage").at("server_tool_use").at("code_execution_requests"), 3);
  const auto& results = sent()[1].at("messages").as_array()[2].at("content").as_array();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].at("tool_use_id"), "toolu_1");
  EXPECT_EQ(results[2].at("tool_use_id"), "toolu_3");
}

TEST_F(MessagesTest, ClientToolsPassThrough) {
  bj::array tools{
      bj::object{{"name", "code_execution"}, {"type", "code_execution_v1"}},
      bj::object{{"name", "get_weather"},
                 {"description", "Weather for a city"},
                 {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}};
  // A server call and a client call in one turn: the server call runs, the turn stops.
  upstream->push_message(U::message({U::tool_use("toolu_s", "bash_code_execution", {{"command", "echo hi"}}),
                                     U::tool_use("toolu_c", "get_weather", {{"city", "Paris"}})},
                                    "tool_use"));
  auto body = request("weather?", tools);
  auto reply = post_json(body);
  EXPECT_EQ(reply.at("stop_reason"), "tool_use");
  const auto& content = reply.at("content").as_array();
  ASSERT_EQ(content.size(), 3u) << bj::serialize(reply);
  EXPECT_EQ(content[1].at("type"), "tool_use");
  EXPECT_EQ(content[1].at("id"), "toolu_c");
  EXPECT_EQ(content[2].at("type"), "bash_code_execution_tool_result");
  EXPECT_EQ(sent()[0].at("tools").as_array().size(), 3u) << "two sub-tools and the client's tool";

  // The client answers its tool; the upstream sees one turn with both calls, then both results.
  upstream->push_message(U::message({U::text_block("Sunny.")}, "end_turn"));
  auto& messages = body["messages"].as_array();
  messages.push_back(bj::object{{"role", "assistant"}, {"content", reply.at("content")}});
  messages.push_back(bj::object{
      {"role", "user"},
      {"content",
       bj::array{bj::object{{"type", "tool_result"}, {"tool_use_id", "toolu_c"}, {"content", "sunny"}}}}});
  auto final_reply = post_json(body);
  EXPECT_EQ(final_reply.at("stop_reason"), "end_turn");
  const auto& history = sent()[1].at("messages").as_array();
  ASSERT_EQ(history.size(), 3u) << bj::serialize(history);
  const auto& turn = history[1].at("content").as_array();
  ASSERT_EQ(turn.size(), 2u);
  EXPECT_EQ(turn[0].at("id"), "srvtoolu_s");
  EXPECT_EQ(turn[1].at("id"), "toolu_c");
  const auto& answers = history[2].at("content").as_array();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].at("tool_use_id"), "srvtoolu_s");
  EXPECT_EQ(answers[1].at("tool_use_id"), "toolu_c");
}

TEST_F(MessagesTest, TheIterationCapPausesTheTurnAndSendingItBackContinues) {
  for (int i = 1; i <= 3; ++i)
    upstream->push_message(U::message({U::tool_use("toolu_p" + std::to_string(i), "bash_code_execution",
                                                   {{"command", "echo " + std::to_string(i) + " >> n"}})},
                                      "tool_use"));
  auto body = request("count");
  auto reply = post_json(body);
  EXPECT_EQ(reply.at("stop_reason"), "pause_turn") << "maxToolIterations is 3";
  ASSERT_EQ(reply.at("content").as_array().size(), 6u);
  EXPECT_EQ(sent().size(), 3u);

  upstream->push_message(
      U::message({U::tool_use("toolu_p4", "bash_code_execution", {{"command", "cat n"}})}, "tool_use"));
  upstream->push_message(U::message({U::text_block("1, 2 and 3")}, "end_turn"));
  body["messages"].as_array().push_back(bj::object{{"role", "assistant"}, {"content", reply.at("content")}});
  auto resumed = post_json(body);
  EXPECT_EQ(resumed.at("stop_reason"), "end_turn");
  EXPECT_EQ(resumed.at("content").as_array()[1].at("content").at("stdout"), "1\n2\n3\n") << "same container";
  // The continuation ends with the results, so the upstream model carries on from them.
  const auto& history = sent()[3].at("messages").as_array();
  ASSERT_EQ(history.size(), 7u) << bj::serialize(history);
  EXPECT_EQ(history[6].at("role"), "user");
  EXPECT_EQ(history[6].at("content").as_array()[0].at("tool_use_id"), "srvtoolu_p3");
}

TEST_F(MessagesTest, AHistoryWithServerBlocksIsTranslatedForTheUpstream) {
  bj::object body = request("");
  body["messages"] = json(R"([
    {"role":"user","content":"make a file"},
    {"role":"assistant","content":[
      {"type":"text","text":"Sure."},
      {"type":"server_tool_use","id":"srvtoolu_x","name":"bash_code_execution","input":{"command":"touch a"}},
      {"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_x",
       "content":{"type":"bash_code_execution_result","stdout":"","stderr":"","return_code":0}},
      {"type":"server_tool_use","id":"srvtoolu_y","name":"text_editor_code_execution","input":{"command":"view","path":"nope"}},
      {"type":"text_editor_code_execution_tool_result","tool_use_id":"srvtoolu_y",
       "content":{"type":"text_editor_code_execution_tool_result_error","error_code":"unavailable",
                  "detail":{"code":"unavailable","explanation":"File not found: /home/agent/workspace/nope"}}},
      {"type":"text","text":"Done."}]},
    {"role":"user","content":"thanks"}])");
  upstream->push_message(U::message({U::text_block("You're welcome.")}, "end_turn"));
  auto reply = post_json(body);
  EXPECT_EQ(reply.at("stop_reason"), "end_turn");
  EXPECT_EQ(reply.at("usage").at("server_tool_use").at("code_execution_requests"), 0);
  const auto& history = sent()[0].at("messages").as_array();
  ASSERT_EQ(history.size(), 7u) << bj::serialize(history);
  const char* roles[] = {"user", "assistant", "user", "assistant", "user", "assistant", "user"};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(history[i].at("role"), roles[i]) << i;
  EXPECT_EQ(history[1].at("content").as_array()[1].at("type"), "tool_use");
  EXPECT_EQ(history[2].at("content").as_array()[0].at("type"), "tool_result");
  const auto& error = history[4].at("content").as_array()[0].as_object();
  EXPECT_EQ(error.at("is_error"), true);
  EXPECT_NE(std::string(error.at("content").as_string()).find("File not found"), std::string::npos);
  EXPECT_EQ(history[5].at("content").as_array()[0].at("text"), "Done.");
}

TEST_F(MessagesTest, StreamingSendsTheEventsInOrderAndTheyReassemble) {
  upstream->push_message(
      U::message({U::text_block("Running it now."),
                  U::tool_use("toolu_s1", "bash_code_execution", {{"command", "echo streamed"}})},
                 "tool_use", 30, 12));
  upstream->push_message(U::message({U::text_block("It printed \"streamed\".")}, "end_turn", 40, 9));
  auto body = request("stream it");
  body["stream"] = true;
  std::string text = post(body, "-N -D " + (server->dir() / "headers").string());
  EXPECT_NE(read_file(server->dir() / "headers").find("text/event-stream"), std::string::npos);
  auto events = parse_sse(text);
  ASSERT_GE(events.size(), 10u) << text;
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "message_stop");
  EXPECT_EQ(events[events.size() - 2].name, "message_delta");
  for (const auto& e : events) EXPECT_EQ(e.data.at("type").as_string(), e.name);
  // Every block starts, then (maybe) deltas, then stops, before the next one starts.
  int open = -1;
  for (const auto& e : events) {
    if (e.name == "content_block_start") {
      EXPECT_EQ(open, -1);
      open = static_cast<int>(e.data.at("index").as_int64());
    } else if (e.name == "content_block_delta") {
      EXPECT_EQ(open, e.data.at("index").as_int64());
    } else if (e.name == "content_block_stop") {
      EXPECT_EQ(open, e.data.at("index").as_int64());
      open = -1;
    }
  }
  auto message = reassemble(events);
  const auto& content = message.at("content").as_array();
  ASSERT_EQ(content.size(), 4u) << bj::serialize(message);
  EXPECT_EQ(content[0].at("text"), "Running it now.");
  EXPECT_EQ(content[1].at("type"), "server_tool_use");
  EXPECT_EQ(content[1].at("input").at("command"), "echo streamed") << "input_json_delta reassembles";
  EXPECT_EQ(content[2].at("content").at("stdout"), "streamed\n") << "the result block arrives whole";
  EXPECT_EQ(content[3].at("text"), "It printed \"streamed\".");
  EXPECT_EQ(message.at("stop_reason"), "end_turn");
  EXPECT_EQ(message.at("container").at("id").as_string(), container)
      << "delta.container in the final message_delta";
  EXPECT_EQ(message.at("usage").at("output_tokens"), 21);
  EXPECT_EQ(message.at("usage").at("server_tool_use").at("code_execution_requests"), 1);
  EXPECT_EQ(sent()[0].at("stream"), true);
}

TEST_F(MessagesTest, ALongCommandKeepsTheStreamAliveWithPings) {
  upstream->push_message(U::message(
      {U::tool_use("toolu_slow", "bash_code_execution", {{"command", "sleep 2.5; echo late"}})}, "tool_use"));
  upstream->push_message(U::message({U::text_block("done")}, "end_turn"));
  auto body = request("slow");
  body["stream"] = true;
  auto events = parse_sse(post(body, "-N"));
  size_t use_stop = 0, result_start = 0, pings = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].name == "content_block_stop" && events[i].data.at("index") == 0) use_stop = i;
    if (events[i].name == "content_block_start" && events[i].data.at("index") == 1) result_start = i;
  }
  for (size_t i = use_stop; i < result_start; ++i) pings += events[i].name == "ping";
  EXPECT_GE(pings, 1u) << "pingIntervalSec is 1 and the command takes 2.5 s";
  EXPECT_EQ(reassemble(events).at("content").as_array()[1].at("content").at("stdout"), "late\n");
}

TEST_F(MessagesTest, WithoutAContainerTheOwnersDefaultOneIsUsed) {
  upstream->push_message(U::message(
      {U::tool_use("toolu_d1", "bash_code_execution", {{"command", "echo kept > mine"}})}, "tool_use"));
  upstream->push_message(U::message({U::text_block("ok")}, "end_turn"));
  auto body = request("remember");
  body.erase("container");
  auto first = post_json(body);
  std::string id(first.at("container").at("id").as_string());
  upstream->push_message(
      U::message({U::tool_use("toolu_d2", "bash_code_execution", {{"command", "cat mine"}})}, "tool_use"));
  upstream->push_message(U::message({U::text_block("ok")}, "end_turn"));
  auto second = post_json(body);
  EXPECT_EQ(second.at("container").at("id").as_string(), id) << "a stable default per owner";
  EXPECT_EQ(second.at("content").as_array()[1].at("content").at("stdout"), "kept\n");
  // Another owner's default is another container.
  upstream->push_message(
      U::message({U::tool_use("toolu_d3", "bash_code_execution", {{"command", "cat mine"}})}, "tool_use"));
  upstream->push_message(U::message({U::text_block("ok")}, "end_turn"));
  fs::path file = server->dir() / "bob.json";
  std::ofstream(file) << bj::serialize(body);
  auto bobs = json(server->curl("-X POST " + server->base() + "/messages --data-binary @" + file.string(),
                                "secret-bob-x"));
  EXPECT_NE(bobs.at("content").as_array()[1].at("content").at("return_code"), 0)
      << "bob cannot see alice's file";
}

// The persistent Python (code_execution_20260120 and 20260521): offered to the model as
// the `code_execution` sub-tool, its state kept from one call to the next, its result
// Anthropic's code_execution_result with the files the code saved.
TEST_F(MessagesTest, ThePersistentPythonIsASubToolOfTheReplVersions) {
  upstream->push_message(
      U::message({U::tool_use("toolu_p1", "code_execution", {{"code", "x = 41\nimport math"}})}, "tool_use"));
  upstream->push_message(U::message(
      {U::tool_use(
          "toolu_p2", "code_execution",
          {{"code",
            "open('/mnt/user-data/outputs/py.txt', 'w').write('from python')\nprint(math.sqrt(4))\nx + 1"}})},
      "tool_use"));
  upstream->push_message(U::message({U::text_block("It is 42.")}, "end_turn"));
  bj::array tools{bj::object{{"name", "code_execution"}, {"type", "code_execution_20260120"}}};
  auto reply = post_json(request("Use Python", tools));
  const auto& content = reply.at("content").as_array();
  ASSERT_EQ(content.size(), 5u) << bj::serialize(reply);
  EXPECT_EQ(content[0].at("type"), "server_tool_use");
  EXPECT_EQ(content[0].at("name"), "code_execution");
  EXPECT_EQ(content[0].at("id"), "srvtoolu_p1");
  EXPECT_EQ(content[1].at("type"), "code_execution_tool_result");
  EXPECT_EQ(content[1].at("tool_use_id"), "srvtoolu_p1");
  EXPECT_EQ(content[1].at("content"),
            json(R"({"type":"code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]})"));
  EXPECT_EQ(content[3].at("type"), "code_execution_tool_result");
  const auto& second = content[3].at("content").as_object();
  EXPECT_EQ(second.at("stdout"), "2.0\n42\n") << "x and the import survived the first call";
  EXPECT_EQ(second.at("return_code"), 0);
  const std::string saved_id = file_id("/mnt/user-data/outputs/py.txt");
  EXPECT_EQ(second.at("content"),
            json(R"([{"type":"code_execution_output","file_id":")" + saved_id + R"("}])"));
  EXPECT_FALSE(second.contains("outputs")) << "the MIME bundles stay out of the model's context";
  EXPECT_EQ(
      server->curl("'" + server->base() + "/files/" + saved_id + "/content?scope_id=" + container + "'"),
      "from python");
  EXPECT_EQ(reply.at("usage").at("server_tool_use").at("code_execution_requests"), 2);
  // The upstream got the sub-tool beside bash and the editor, and the results as JSON.
  const auto& upstream_tools = sent()[0].at("tools").as_array();
  ASSERT_EQ(upstream_tools.size(), 3u);
  EXPECT_EQ(upstream_tools[2].at("name"), "code_execution");
  EXPECT_EQ(upstream_tools[2].at("input_schema").at("required"), json(R"(["code"])"));
  const auto& fed_back = sent()[2].at("messages").as_array()[4].at("content").as_array()[0].as_object();
  EXPECT_EQ(fed_back.at("tool_use_id"), "toolu_p2");
  EXPECT_NE(std::string(fed_back.at("content").as_string()).find(R"("stdout":"2.0\n42\n")"),
            std::string::npos);

  // An exception is return_code 1 with the traceback, streamed as one block; the
  // response sent back as history is accepted (code_execution_tool_result included).
  upstream->push_message(
      U::message({U::tool_use("toolu_p3", "code_execution", {{"code", "1/0"}})}, "tool_use"));
  upstream->push_message(U::message({U::text_block("Division by zero.")}, "end_turn"));
  bj::object body = request(
      "Divide", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_20260521"}}});
  auto& messages = body["messages"].as_array();
  messages.push_back(bj::object{{"role", "assistant"}, {"content", content}});
  messages.push_back(bj::object{{"role", "user"}, {"content", "Now divide by zero"}});
  body["stream"] = true;
  auto events = parse_sse(post(body, "-N"));
  auto streamed = reassemble(events);
  const auto& blocks = streamed.at("content").as_array();
  ASSERT_EQ(blocks.size(), 3u) << bj::serialize(streamed);
  EXPECT_EQ(blocks[0].at("type"), "server_tool_use");
  EXPECT_EQ(blocks[0].at("input").at("code"), "1/0");
  EXPECT_EQ(blocks[1].at("type"), "code_execution_tool_result");
  EXPECT_EQ(blocks[1].at("content").at("return_code"), 1);
  EXPECT_NE(std::string(blocks[1].at("content").at("stderr").as_string()).find("ZeroDivisionError"),
            std::string::npos);
  EXPECT_EQ(streamed.at("stop_reason"), "end_turn");
  // The history reached the upstream as plain tool turns.
  const auto& history = sent()[3].at("messages").as_array();
  ASSERT_GE(history.size(), 6u);
  EXPECT_EQ(history[1].at("content").as_array()[0].at("type"), "tool_use");
  EXPECT_EQ(history[1].at("content").as_array()[0].at("name"), "code_execution");
  EXPECT_EQ(history[2].at("content").as_array()[0].at("type"), "tool_result");

  // code_execution_20250825 has no persistent Python (without programmatic tools).
  upstream->push_message(U::message({U::text_block("ok")}, "end_turn"));
  post_json(
      request("hi", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_20250825"}}}));
  EXPECT_EQ(sent()[5].at("tools").as_array().size(), 2u);
}

// Programmatic tool calling: a client tool whose allowed_callers name the code tool is
// an async function in the Python; a call pauses the turn (stop_reason tool_use, a
// tool_use with `caller`), the client's tool_result resumes the same running code, and
// the model gets only the code and its final result.
bj::array programmatic_tools(const char* version = "code_execution_20260120") {
  return bj::array{bj::object{{"name", "code_execution"}, {"type", version}},
                   bj::object{{"name", "get_price"},
                              {"description", "The price of an item, as a decimal string."},
                              {"input_schema",
                               {{"type", "object"},
                                {"properties", {{"item", {{"type", "string"}}}}},
                                {"required", bj::array{"item"}}}},
                              {"allowed_callers", bj::array{version}}}};
}

TEST_F(MessagesTest, CodeCallsClientToolsAndTheTurnPausesUntilTheyAreAnswered) {
  const std::string code =
      "import asyncio\n"
      "a = await get_price(item='apple')\n"
      "b, c = await asyncio.gather(get_price(item='pear'), get_price({'item': 'plum'}))\n"
      "print(a, b, c)\n"
      "float(a) + float(b) + float(c)";
  upstream->push_message(U::message(
      {U::text_block("Adding prices."), U::tool_use("toolu_c1", "code_execution", {{"code", code}})},
      "tool_use"));
  auto body = request("What do the fruits cost together?", programmatic_tools());
  auto first = post_json(body);
  ASSERT_EQ(first.at("stop_reason"), "tool_use") << bj::serialize(first);
  const auto& paused = first.at("content").as_array();
  ASSERT_EQ(paused.size(), 3u) << bj::serialize(first);
  EXPECT_EQ(paused[1].at("type"), "server_tool_use");
  EXPECT_EQ(paused[1].at("id"), "srvtoolu_c1");
  const auto& call = paused[2].as_object();
  EXPECT_EQ(call.at("type"), "tool_use");
  EXPECT_EQ(call.at("name"), "get_price");
  EXPECT_EQ(call.at("input"), json(R"({"item":"apple"})"));
  EXPECT_EQ(call.at("caller"), json(R"({"type":"code_execution_20260120","tool_id":"srvtoolu_c1"})"));
  EXPECT_TRUE(std::string(call.at("id").as_string()).starts_with("toolu_"));
  EXPECT_EQ(first.at("container").at("id").as_string(), container);
  // The model got the code tool with the function in its description, not the tool itself.
  const auto& offered = sent()[0].at("tools").as_array();
  ASSERT_EQ(offered.size(), 3u) << bj::serialize(offered);
  EXPECT_EQ(offered[2].at("name"), "code_execution");
  EXPECT_NE(std::string(offered[2].at("description").as_string()).find("async def get_price"),
            std::string::npos);

  // The answer without the container: Anthropic's error.
  auto& messages = body["messages"].as_array();
  messages.push_back(bj::object{{"role", "assistant"}, {"content", paused}});
  messages.push_back(bj::object{
      {"role", "user"},
      {"content",
       bj::array{bj::object{{"type", "tool_result"}, {"tool_use_id", call.at("id")}, {"content", "1.5"}}}}});
  bj::object without_container = body;
  without_container.erase("container");
  auto refused = json(post(without_container)).as_object();
  EXPECT_EQ(refused.at("error").at("type"), "invalid_request_error");
  EXPECT_EQ(
      refused.at("error").at("message"),
      "container_id is required when there are pending tool uses generated by code execution with tools.");

  // With it, the same code runs on, to its next calls (both of the gather, together),
  // streamed; the model is not asked meanwhile.
  const size_t asked = sent().size();
  body["stream"] = true;
  auto second = reassemble(parse_sse(post(body, "-N")));
  EXPECT_EQ(sent().size(), asked) << "the code's calls never reach the model";
  ASSERT_EQ(second.at("stop_reason"), "tool_use") << bj::serialize(second);
  const auto& calls = second.at("content").as_array();
  ASSERT_EQ(calls.size(), 2u) << bj::serialize(second);
  EXPECT_EQ(calls[0].at("input"), json(R"({"item":"pear"})"));
  EXPECT_EQ(calls[1].at("input"), json(R"({"item":"plum"})"));
  EXPECT_EQ(calls[1].at("caller").at("tool_id"), "srvtoolu_c1");
  EXPECT_EQ(second.at("container").at("id").as_string(), container);

  // Answering again what was answered: that pause is gone.
  bj::object replay = body;
  replay.erase("stream");
  auto late = json(post(replay)).as_object();
  EXPECT_EQ(late.at("error").at("type"), "invalid_request_error") << bj::serialize(late);

  // Both answers: the code ends, its result comes first, then the model's turn.
  upstream->push_message(U::message({U::text_block("Together 6.5.")}, "end_turn"));
  messages.push_back(bj::object{{"role", "assistant"}, {"content", calls}});
  messages.push_back(bj::object{
      {"role", "user"},
      {"content",
       bj::array{bj::object{{"type", "tool_result"}, {"tool_use_id", calls[0].at("id")}, {"content", "2"}},
                 bj::object{{"type", "tool_result"},
                            {"tool_use_id", calls[1].at("id")},
                            {"content", bj::array{bj::object{{"type", "text"}, {"text", "3"}}}}}}}});
  auto third = reassemble(parse_sse(post(body, "-N")));
  ASSERT_EQ(third.at("stop_reason"), "end_turn") << bj::serialize(third);
  const auto& last = third.at("content").as_array();
  ASSERT_EQ(last.size(), 2u) << bj::serialize(third);
  EXPECT_EQ(last[0].at("type"), "code_execution_tool_result");
  EXPECT_EQ(last[0].at("tool_use_id"), "srvtoolu_c1");
  EXPECT_EQ(last[0].at("content").at("stdout"), "1.5 2 3\n6.5\n");
  EXPECT_EQ(last[0].at("content").at("return_code"), 0);
  EXPECT_EQ(last[1].at("text"), "Together 6.5.");
  // The model read the code and its final result only.
  const auto& history = sent().back().at("messages").as_array();
  ASSERT_EQ(history.size(), 3u) << bj::serialize(history);
  EXPECT_EQ(history[1].at("content").as_array()[1].at("name"), "code_execution");
  EXPECT_EQ(history[1].at("content").as_array().size(), 2u);
  const auto& fed = history[2].at("content").as_array();
  ASSERT_EQ(fed.size(), 1u);
  EXPECT_EQ(fed[0].at("tool_use_id"), "srvtoolu_c1");
  EXPECT_NE(std::string(fed[0].at("content").as_string()).find("6.5"), std::string::npos);
  for (const auto& message : history)
    for (const auto& block : message.at("content").as_array()) {
      if (block.at("type") == "tool_use") {
        EXPECT_EQ(block.at("name"), "code_execution") << "no call the code made";
      }
      if (block.at("type") == "tool_result") {
        EXPECT_EQ(block.at("tool_use_id"), "srvtoolu_c1");
      }
    }
}

TEST_F(MessagesTest, AnUnansweredPauseExpiresAndTheCallRaisesInTheCode) {
  const std::string code =
      "try:\n"
      "    await get_price(item='late')\n"
      "except ToolCallError as e:\n"
      "    caught = type(e).__name__\n"
      "    open('/mnt/user-data/outputs/late.txt', 'w').write(str(e))\n";
  upstream->push_message(
      U::message({U::tool_use("toolu_x1", "code_execution", {{"code", code}})}, "tool_use"));
  auto body = request("Ask late", programmatic_tools("code_execution_20250825"));
  auto first = post_json(body);
  ASSERT_EQ(first.at("stop_reason"), "tool_use") << bj::serialize(first);
  const auto& call = first.at("content").as_array().back().as_object();
  EXPECT_EQ(call.at("caller").at("type"), "code_execution_20250825");
  // Past toolResultTimeoutSec (5 s here) the call fails in the code, which goes on.
  const std::string saved = file_id("/mnt/user-data/outputs/late.txt");
  std::string text;
  eventually(
      [&] {
        text =
            server->curl("'" + server->base() + "/files/" + saved + "/content?scope_id=" + container + "'");
        return text.find("TimeoutError") != std::string::npos;
      },
      std::chrono::seconds(30));
  EXPECT_NE(text.find("TimeoutError"), std::string::npos) << text;
  // A late answer is refused; the kernel is free for the next call, its state kept.
  auto& messages = body["messages"].as_array();
  messages.push_back(bj::object{{"role", "assistant"}, {"content", first.at("content")}});
  messages.push_back(bj::object{
      {"role", "user"},
      {"content",
       bj::array{bj::object{{"type", "tool_result"}, {"tool_use_id", call.at("id")}, {"content", "9"}}}}});
  auto late = json(post(body)).as_object();
  EXPECT_EQ(late.at("error").at("type"), "invalid_request_error") << bj::serialize(late);
  EXPECT_NE(std::string(late.at("error").at("message").as_string()).find("not waiting"), std::string::npos);
  auto next = server->curl_json(
      "-X POST '" + server->base() + "/containers/" + container +
      "/tools/code_execution' -H 'content-type: application/json' -d '{\"code\": \"caught\"}'");
  EXPECT_EQ(next.at("stdout"), "'ToolCallError'\n") << bj::serialize(next);
}

TEST_F(MessagesTest, ErrorBlocksFollowTheToolVersion) {
  for (const char* type : {"code_execution_v1", "code_execution_20250825"}) {
    upstream->push_message(U::message(
        {U::tool_use("toolu_v", "text_editor_code_execution", {{"command", "view"}, {"path", "missing.txt"}}),
         U::tool_use("toolu_w", "text_editor_code_execution",
                     {{"command", "create"}, {"path", "/mnt/user-data/uploads/x"}, {"file_text", ""}})},
        "tool_use"));
    upstream->push_message(U::message({U::text_block("no such file")}, "end_turn"));
    auto reply =
        post_json(request("view", bj::array{bj::object{{"name", "code_execution"}, {"type", type}}}));
    const auto& error = reply.at("content").as_array()[2].at("content").as_object();
    EXPECT_EQ(error.at("type"), "text_editor_code_execution_tool_result_error");
    EXPECT_EQ(error.at("error_code"), "unavailable");
    if (std::string(type) == "code_execution_v1") {
      EXPECT_EQ(error.at("detail").at("explanation"), "File not found: /home/agent/workspace/missing.txt");
      EXPECT_EQ(reply.at("content").as_array()[3].at("content").at("detail").at("explanation"),
                "Path '/mnt/user-data/uploads/x' is in a read-only mount");
    } else {
      EXPECT_FALSE(error.contains("detail")) << "the Anthropic shape has no detail";
    }
    // The upstream model still learns why.
    auto fed = sent().back().at("messages").as_array().back().at("content").as_array()[0].as_object();
    EXPECT_EQ(fed.at("is_error"), true);
    EXPECT_NE(std::string(fed.at("content").as_string()).find("File not found"), std::string::npos);
  }
}

TEST_F(MessagesTest, ValidationAnswersLikeTheAnthropicApi) {
  auto check = [&](bj::object body, const std::string& message) {
    auto reply = json(post(body)).as_object();
    ASSERT_TRUE(reply.contains("error")) << bj::serialize(reply);
    EXPECT_EQ(reply.at("type"), "error");
    EXPECT_EQ(reply.at("error").at("type"), "invalid_request_error");
    EXPECT_EQ(reply.at("error").at("message").as_string(), message);
    EXPECT_EQ(post_status(body), 400);
    EXPECT_EQ(post_status(body, "/messages/validate"), 400);
  };
  auto body = request("hi");
  auto without = [&](const char* key) {
    auto b = body;
    b.erase(key);
    return b;
  };
  check(without("max_tokens"), "max_tokens: Field required");
  check(without("model"), "model: Field required");
  check(without("messages"), "messages: Field required");
  auto bad = body;
  bad["max_tokens"] = 0;
  check(bad, "max_tokens: Input should be an integer greater than or equal to 1");
  bad = body;
  bad["messages"].as_array()[0].as_object()["role"] = "system";
  check(bad, "messages.0.role: Input should be 'user' or 'assistant'");
  bad = body;
  bad["messages"].as_array()[0].as_object()["content"] = bj::array{bj::object{{"type", "text"}}};
  check(bad, "messages.0.content.0.text: Field required");
  bad = body;
  bad["tools"] = bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_20240101"}}};
  check(
      bad,
      "tools.0.type: the code_execution tool's type must be 'code_execution_v1', 'code_execution_20250825', "
      "'code_execution_20260120' or 'code_execution_20260521', not 'code_execution_20240101'");
  bad = body;
  bad["messages"].as_array()[0].as_object()["content"] = bj::array{bj::object{{"type", "container_upload"}}};
  check(bad, "messages.0.content.0.file_id: Field required");
  bad = body;
  bad["container"] = "../etc";
  check(bad, "container: a container id is 1 to 128 characters of letters, digits, '.', '_', ':' and '-'");
  bad = body;
  bad["surprise"] = 1;
  check(bad, "surprise: Extra inputs are not permitted");
  bad = body;
  bad["stream"] = "yes";
  check(bad, "stream: Input should be a valid boolean");
  EXPECT_EQ(json(post(body, "", "/messages/validate")), json(R"({"valid":true})"));
  // {"id": ...} is a container too; the SDKs' ?beta=true and beta headers are accepted.
  body["container"] = bj::object{{"id", container}};
  EXPECT_EQ(
      json(post(body, "-H 'anthropic-beta: code-execution-2025-08-25' -H 'anthropic-version: 2023-06-01'",
                "/messages/validate?beta=true")),
      json(R"({"valid":true})"));
  EXPECT_TRUE(sent().empty()) << "validation never calls the upstream";
  EXPECT_EQ(server->status("-X POST '" + server->base() + "/messages' -d 'not json'"), 400);
  EXPECT_EQ(server->status("-X GET '" + server->base() + "/messages'"), 405);
}

TEST_F(MessagesTest, UpstreamErrorsBecomeDocumentedAnswers) {
  auto body = request("hi");
  auto error_of = [&](const std::string& text) { return json(text).at("error").as_object(); };
  upstream->push(
      {{"status", 400}, {"error", {{"type", "invalid_request_error"}, {"message", "prompt is too long"}}}});
  EXPECT_EQ(post_status(body), 400);
  upstream->push(
      {{"status", 400}, {"error", {{"type", "invalid_request_error"}, {"message", "prompt is too long"}}}});
  EXPECT_EQ(error_of(post(body)).at("message"), "prompt is too long") << "4xx passed on";
  upstream->push({{"status", 529}, {"error", {{"type", "overloaded_error"}, {"message", "Overloaded"}}}});
  EXPECT_EQ(post_status(body), 529);
  upstream->push({{"status", 529}, {"error", {{"type", "overloaded_error"}, {"message", "Overloaded"}}}});
  EXPECT_EQ(error_of(post(body)).at("type"), "overloaded_error");
  upstream->push({{"status", 500}, {"error", {{"type", "api_error"}, {"message", "boom"}}}});
  EXPECT_EQ(post_status(body), 502);
  upstream->push({{"status", 503}, {"error", {{"type", "api_error"}, {"message", "boom"}}}});
  auto error = error_of(post(body));
  EXPECT_EQ(error.at("type"), "api_error");
  EXPECT_EQ(error.at("message"), "The upstream model failed (HTTP 503): boom");
  upstream->push({{"close", true}});
  EXPECT_EQ(post_status(body), 502) << "a connection closed without an answer";
  // Garbage in a stream that began well: an error event ends the stream.
  upstream->push({{"raw_sse", "event: message_start\ndata: {not json\n\n"}});
  body["stream"] = true;
  auto events = parse_sse(post(body, "-N"));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "error");
  EXPECT_EQ(events.back().data.at("error").at("type"), "api_error");
  // A stream that stops early.
  upstream->push(
      {{"raw_sse",
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{}}}\n\n"}});
  events = parse_sse(post(body, "-N"));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "error");
  EXPECT_NE(std::string(events.back().data.at("error").at("message").as_string()).find("before message_stop"),
            std::string::npos);
  // A tool call without an id, in an answer and in a stream.
  bj::object no_id{{"type", "tool_use"}, {"name", "bash_code_execution"}, {"input", bj::object{}}};
  upstream->push_message(U::message({no_id}, "tool_use"));
  body["stream"] = false;
  EXPECT_EQ(post_status(body), 502);
  upstream->push_message(U::message({no_id}, "tool_use"));
  body["stream"] = true;
  events = parse_sse(post(body, "-N"));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "error");
  // The server is unharmed.
  EXPECT_EQ(server->status(server->url("/health")), 200);
}

TEST(MessagesUpstream, RefusedAndSilentUpstreamsAnswer502WithinTheTimeout) {
  const uint16_t refused_port = free_loopback_port();  // nothing listens there
  ScriptedUpstream silent;
  {
    ServerProcess server("model:\n  baseUrl: \"http://127.0.0.1:" + std::to_string(refused_port) + "\"\n");
    fs::path file = server.dir() / "b.json";
    std::ofstream(file) << R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})";
    auto reply = json(server.curl("-X POST " + server.base() + "/messages --data-binary @" + file.string()));
    EXPECT_EQ(reply.at("error").at("type"), "api_error");
    EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find("could not be reached"),
              std::string::npos);
  }
  {
    silent.push({{"hang_ms", 10000}});
    ServerProcess server("model:\n  baseUrl: \"" + silent.base_url() + "\"\n  timeoutSec: 1\n");
    fs::path file = server.dir() / "b.json";
    std::ofstream(file) << R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})";
    EXPECT_EQ(server.status("-X POST " + server.base() + "/messages --data-binary @" + file.string()), 502);
  }
  {
    ServerProcess server;  // no model configured
    fs::path file = server.dir() / "b.json";
    std::ofstream(file) << R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})";
    auto reply = json(server.curl("-X POST " + server.base() + "/messages --data-binary @" + file.string()));
    EXPECT_EQ(reply.at("error").at("type"), "invalid_request_error");
    EXPECT_NE(
        std::string(reply.at("error").at("message").as_string()).find("No upstream model is configured"),
        std::string::npos);
  }
}

TEST_F(MessagesTest, AClientThatDisconnectsCancelsTheCommandAndTheUpstreamCall) {
  // The command would run 30 s; the client leaves after 2.
  upstream->push_message(
      U::message({U::tool_use("toolu_k", "bash_code_execution",
                              {{"command", "sleep 30; touch /mnt/user-data/outputs/finished"}})},
                 "tool_use"));
  auto body = request("long");
  body["stream"] = true;
  post(body, "-N --max-time 2");
  // The command's tree is killed: nothing sleeps in the container any more.
  // Each look must be a real listing (the cat itself is in it), not an error reply.
  std::string processes;
  for (int i = 0; i < 50; ++i) {
    fs::path file = server->dir() / "ps.json";
    std::ofstream(file) << R"({"command":"cat /proc/[0-9]*/cmdline | tr '\\0' ' '"})";
    auto reply = json(server->curl("-X POST " + server->base() + "/containers/" + container +
                                   "/tools/bash_code_execution --data-binary @" + file.string()));
    ASSERT_TRUE(reply.is_object() && reply.as_object().contains("stdout")) << bj::serialize(reply);
    processes = std::string(reply.at("stdout").as_string());
    ASSERT_NE(processes.find("cat /proc/"), std::string::npos) << bj::serialize(reply);
    if (processes.find("sleep 30") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(processes.find("sleep 30"), std::string::npos) << processes;
  EXPECT_EQ(sent().size(), 1u) << "no second upstream call";

  // A stream cut while the upstream is still answering: the upstream call is closed.
  int before = upstream->cancelled_streams();
  upstream->push(
      {{"message", U::message({U::text_block("partial"), U::text_block("never sent")}, "end_turn")},
       {"stall_after_block", 0},
       {"stall_ms", 20000}});
  post(body, "-N --max-time 1");
  for (int i = 0; i < 50 && upstream->cancelled_streams() == before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(upstream->cancelled_streams(), before + 1) << "the upstream saw its call closed";
}

}  // namespace

namespace {

// Scripts one bash call and a closing text, then sends a one-line turn in `container`.
bj::object turn_with_one_bash_call(ScriptedUpstream& upstream, ServerProcess& server,
                                   const std::string& container) {
  upstream.push_message(ScriptedUpstream::message(
      {ScriptedUpstream::tool_use("toolu_one", "bash_code_execution", {{"command", "echo hi"}})},
      "tool_use"));
  upstream.push_message(ScriptedUpstream::message({ScriptedUpstream::text_block("done")}, "end_turn"));
  fs::path file = server.dir() / "one-call.json";
  std::ofstream(file) << R"({"model":"default","max_tokens":5,"container":")" << container
                      << R"(","messages":[{"role":"user","content":"hi"}],)"
                      << R"("tools":[{"name":"code_execution","type":"code_execution_v1"}]})";
  return json(server.curl("-X POST " + server.base() + "/messages --data-binary @" + file.string()))
      .as_object();
}

TEST(MessagesWithoutProvider, CodeExecutionAnswersWithTheSeedsErrorBlock) {
  ScriptedUpstream upstream;
  ServerProcess server(model_yaml(upstream) + "runtime:\n  provider: none\n");
  auto reply = turn_with_one_bash_call(upstream, server, "np");
  const auto& error = reply.at("content").as_array().at(1).at("content").as_object();
  EXPECT_EQ(error.at("type"), "bash_code_execution_tool_result_error");
  EXPECT_EQ(error.at("error_code"), "unavailable");
  EXPECT_EQ(error.at("detail").at("explanation"), "code_execution provider is not configured.");
  // The direct endpoints say the same; files still work.
  auto direct = json(server.curl(
      "-X POST " + server.base() +
      "/containers/np/tools/text_editor_code_execution -d '{\"command\":\"view\",\"path\":\"/\"}'"));
  EXPECT_EQ(direct.at("detail").at("explanation"), "code_execution provider is not configured.");
  std::ofstream(server.dir() / "in.txt") << "data";
  auto uploaded = json(server.curl("-X POST '" + server.base() + "/files?scope_id=np' -F file=@" +
                                   (server.dir() / "in.txt").string()));
  EXPECT_EQ(uploaded.at("size_bytes"), 4);
}

}  // namespace

namespace {

TEST(MessagesCapacity, ACallCapacityRefusesIsAnErrorBlockInTheTurn) {
  ScriptedUpstream upstream;
  ServerProcess server(model_yaml(upstream) +
                       "capacity:\n  maxConcurrentExecutions: 1\n  queueTimeoutSec: 1\n");
  fs::path hold = server.dir() / "hold.json";
  std::ofstream(hold) << R"({"command":"sleep 3"})";
  auto holder = std::async(std::launch::async, [&] {
    return server.curl("-X POST " + server.base() + "/containers/busy/tools/bash_code_execution -d @" +
                       hold.string());
  });
  ASSERT_TRUE(eventually([&] { return server.metric("sandboxd_executions_active") == 1; }));
  auto reply = turn_with_one_bash_call(upstream, server, "q");
  EXPECT_EQ(reply.at("stop_reason"), "end_turn") << bj::serialize(reply);
  const auto& error = reply.at("content").as_array().at(1).at("content").as_object();
  EXPECT_EQ(error.at("type"), "bash_code_execution_tool_result_error");
  EXPECT_EQ(error.at("error_code"), "too_many_requests");
  EXPECT_EQ(json(holder.get()).at("return_code"), 0);
}

}  // namespace
