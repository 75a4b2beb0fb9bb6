// The tool loop of /messages on its own (model/tool_loop.h): what the client gets and what
// the upstream is sent, turn by turn, with the sub-tools run by a runner the test holds (the
// loop's seam to a container) and the scripted upstream model on loopback. Also the
// request's validation and the upstream error mapping (model/messages_request.h). Pure
// logic: no root, no sandboxd server.

#include "model/tool_loop.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <optional>
#include <string>
#include <vector>

#include "messages/error_types.h"
#include "model/messages_request.h"
#include "scripted_upstream.h"

namespace {

namespace asio = boost::asio;
namespace bj = boost::json;
using sandboxd::Result;
using sandboxd::model::EventSink;
using sandboxd::model::LoopSettings;
using sandboxd::model::MessagesRequest;
using sandboxd::model::ToolLoop;
using sandboxd::model::ToolRunner;
using U = sandboxd::testing::ScriptedUpstream;

// Runs each sub-tool call by answering with the next scripted result, and records them.
class ScriptedRunner : public ToolRunner {
 public:
  std::vector<bj::object> results;
  std::vector<std::pair<std::string, bj::object>> calls;

  asio::awaitable<bj::object> run(std::string_view tool, const bj::object& input) override {
    calls.emplace_back(std::string(tool), input);
    bj::object result = results.at(calls.size() - 1);
    co_return result;
  }
  // No container here: a turn's `container` is null.
  bj::value container() override { return nullptr; }
};

// Records the events a streamed turn sends.
class RecordingSink : public EventSink {
 public:
  std::vector<std::pair<std::string, bj::object>> events;
  asio::awaitable<bool> send(std::string_view event, const bj::object& data) override {
    events.emplace_back(std::string(event), data);
    co_return true;
  }
};

bool any_container_id(std::string_view) { return true; }

MessagesRequest request(bj::value tools = nullptr) {
  bj::object body{{"model", "m"},
                  {"max_tokens", 100},
                  {"messages", bj::array{bj::object{{"role", "user"}, {"content", "Count the files"}}}}};
  body["tools"] = tools.is_null()
                      ? bj::array{bj::object{{"type", "code_execution_20250825"}, {"name", "code_execution"}}}
                      : tools;
  auto parsed = sandboxd::model::parse_messages_request(std::move(body), any_container_id);
  EXPECT_TRUE(parsed.has_value()) << (parsed.has_value() ? "" : parsed.error().message);
  return std::move(*parsed);
}

bj::object bash_result(const std::string& out) {
  return {{"type", "bash_code_execution_result"},
          {"stdout", out},
          {"stderr", ""},
          {"return_code", 0},
          {"content", bj::array{}}};
}

class ToolLoopTest : public ::testing::Test {
 protected:
  LoopSettings settings() const {
    LoopSettings s;
    s.messages_url = upstream_.base_url() + "/v1/messages";
    s.headers = {"Content-Type: application/json", "anthropic-version: 2023-06-01"};
    s.timeout = std::chrono::seconds(60);
    return s;
  }
  // The whole turn as one message.
  Result<bj::object> run(MessagesRequest req, LoopSettings s) {
    asio::io_context io;
    ToolLoop loop(client_, std::move(s), std::move(req), "upstream-model", runner_, nullptr);
    std::optional<Result<bj::object>> out;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { out.emplace(co_await loop.run()); }, asio::detached);
    io.run();
    EXPECT_TRUE(out) << "the loop ended";
    return std::move(*out);
  }
  // The turn streamed: open(), then stream() into a sink.
  RecordingSink stream(MessagesRequest req) {
    asio::io_context io;
    ToolLoop loop(client_, settings(), std::move(req), "upstream-model", runner_, nullptr);
    RecordingSink sink;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto opened = co_await loop.open();
          EXPECT_TRUE(opened.has_value());
          if (opened) co_await loop.stream(sink);
        },
        asio::detached);
    io.run();
    return sink;
  }

  U upstream_;
  std::shared_ptr<sandboxd::model::UpstreamClient> client_ = sandboxd::model::UpstreamClient::create();
  ScriptedRunner runner_;
};

TEST_F(ToolLoopTest, ASubToolCallRunsAndItsResultGoesBackUpstream) {
  upstream_.push_message(
      U::message({U::text_block("Let me look."),
                  U::tool_use("toolu_01A", "bash_code_execution", {{"command", "ls | wc -l"}})},
                 "tool_use", 10, 5));
  upstream_.push_message(U::message({U::text_block("There are 3 files.")}, "end_turn", 20, 7));
  runner_.results = {bash_result("3\n")};

  auto reply = run(request(), settings());
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  ASSERT_EQ(runner_.calls.size(), 1u);
  EXPECT_EQ(runner_.calls[0].first, "bash_code_execution");
  EXPECT_EQ(runner_.calls[0].second.at("command"), "ls | wc -l");

  // What the client gets: the model's blocks, the call as a server_tool_use, its result.
  const auto& content = reply->at("content").as_array();
  ASSERT_EQ(content.size(), 4u) << bj::serialize(*reply);
  EXPECT_EQ(content[0].at("text"), "Let me look.");
  EXPECT_EQ(content[1].at("type"), "server_tool_use");
  EXPECT_EQ(content[1].at("id"), "srvtoolu_01A");
  EXPECT_EQ(content[1].at("name"), "bash_code_execution");
  EXPECT_EQ(content[1].at("caller").at("type"), "direct");
  EXPECT_EQ(content[2].at("type"), "bash_code_execution_tool_result");
  EXPECT_EQ(content[2].at("tool_use_id"), "srvtoolu_01A");
  EXPECT_EQ(content[2].at("content"), bash_result("3\n"));
  EXPECT_EQ(content[3].at("text"), "There are 3 files.");
  EXPECT_EQ(reply->at("stop_reason"), "end_turn");
  EXPECT_EQ(reply->at("usage").at("input_tokens"), 30) << "the turns' usage added up";
  EXPECT_EQ(reply->at("usage").at("output_tokens"), 12);
  EXPECT_EQ(reply->at("usage").at("server_tool_use").at("code_execution_requests"), 1);

  // What the upstream is sent: the sub-tools as tools, then the turn and its result.
  auto sent = upstream_.requests();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].at("model"), "upstream-model");
  const auto& tools = sent[0].at("tools").as_array();
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].at("name"), "bash_code_execution");
  EXPECT_EQ(tools[1].at("name"), "text_editor_code_execution");
  const auto& history = sent[1].at("messages").as_array();
  ASSERT_EQ(history.size(), 3u) << bj::serialize(history);
  EXPECT_EQ(history[1].at("role"), "assistant");
  EXPECT_EQ(history[1].at("content").as_array()[1].at("id"), "toolu_01A") << "the upstream's own id";
  const auto& fed = history[2].at("content").as_array()[0];
  EXPECT_EQ(fed.at("type"), "tool_result");
  EXPECT_EQ(fed.at("tool_use_id"), "toolu_01A");
  EXPECT_EQ(bj::parse(fed.at("content").as_string()),
            bj::parse(R"({"stdout":"3\n","stderr":"","return_code":0,"content":[]})"))
      << "the result without its type, as JSON";
  EXPECT_FALSE(fed.as_object().contains("is_error"));
}

TEST_F(ToolLoopTest, AnErrorResultIsMarkedForTheModel) {
  upstream_.push_message(
      U::message({U::tool_use("toolu_e", "bash_code_execution", {{"command", "x"}})}, "tool_use"));
  upstream_.push_message(U::message({U::text_block("It failed.")}, "end_turn"));
  runner_.results = {bj::object{{"type", "bash_code_execution_tool_result_error"},
                                {"error_code", "unavailable"},
                                {"detail", {{"explanation", "no sandbox"}}}}};
  auto reply = run(request(), settings());
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  const auto sent = upstream_.requests();
  ASSERT_EQ(sent.size(), 2u);
  const auto& fed = sent[1].at("messages").as_array().at(2).at("content").as_array().at(0);
  EXPECT_EQ(fed.at("is_error"), true);
  EXPECT_EQ(fed.at("content"), "Error (unavailable): no sandbox");
  const auto& shown = reply->at("content").as_array()[1].at("content").as_object();
  EXPECT_FALSE(shown.contains("detail")) << "Anthropic's tool versions have no detail (a Zylon extension)";
}

TEST_F(ToolLoopTest, TheIterationCapPausesTheTurn) {
  upstream_.push_message(
      U::message({U::tool_use("toolu_1", "bash_code_execution", {{"command", "a"}})}, "tool_use"));
  upstream_.push_message(U::message({U::text_block("never asked")}, "end_turn"));
  runner_.results = {bash_result("a\n")};
  auto s = settings();
  s.max_tool_iterations = 1;
  auto reply = run(request(), s);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(reply->at("stop_reason"), "pause_turn");
  EXPECT_EQ(upstream_.requests().size(), 1u) << "no second upstream round";
  EXPECT_EQ(upstream_.pending_steps(), 1u);
}

TEST_F(ToolLoopTest, AClientToolCallEndsTheTurnForTheClient) {
  bj::array tools{bj::object{{"type", "code_execution_20250825"}, {"name", "code_execution"}},
                  bj::object{{"name", "get_weather"},
                             {"description", "Weather"},
                             {"input_schema", {{"type", "object"}, {"properties", bj::object{}}}}}};
  upstream_.push_message(U::message({U::tool_use("toolu_w", "get_weather", {{"city", "Oslo"}})}, "tool_use"));
  auto reply = run(request(tools), settings());
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_TRUE(runner_.calls.empty()) << "a client tool is never run by sandboxd";
  EXPECT_EQ(reply->at("stop_reason"), "tool_use");
  const auto& block = reply->at("content").as_array()[0];
  EXPECT_EQ(block.at("type"), "tool_use");
  EXPECT_EQ(block.at("id"), "toolu_w");
  EXPECT_EQ(block.at("caller").at("type"), "direct");
}

TEST_F(ToolLoopTest, AnOverloadedUpstreamIsPassedOnAs529) {
  upstream_.push({{"status", 529}, {"error", {{"type", "overloaded_error"}, {"message", "busy"}}}});
  auto reply = run(request(), settings());
  ASSERT_FALSE(reply.has_value());
  EXPECT_EQ(reply.error().kind, sandboxd::ErrorKind::upstream_overloaded);
  const auto shape = sandboxd::messages::anthropic_error(reply.error().kind);
  EXPECT_EQ(shape.status, 529u);
  EXPECT_EQ(shape.type, "overloaded_error");
}

TEST_F(ToolLoopTest, AStreamedTurnSendsTheCallAndItsResultAsBlocks) {
  upstream_.push_message(
      U::message({U::tool_use("toolu_s", "bash_code_execution", {{"command", "pwd"}})}, "tool_use"));
  upstream_.push_message(U::message({U::text_block("Done.")}, "end_turn"));
  runner_.results = {bash_result("/\n")};
  auto sink = stream(request());
  ASSERT_FALSE(sink.events.empty());
  EXPECT_EQ(sink.events.front().first, "message_start");
  EXPECT_EQ(sink.events.back().first, "message_stop");
  std::vector<std::string> started;
  std::string stop_reason;
  for (const auto& [name, data] : sink.events) {
    if (name == "content_block_start") started.emplace_back(data.at("content_block").at("type").as_string());
    if (name == "message_delta") stop_reason = data.at("delta").at("stop_reason").as_string();
  }
  EXPECT_EQ(started,
            (std::vector<std::string>{"server_tool_use", "bash_code_execution_tool_result", "text"}));
  EXPECT_EQ(stop_reason, "end_turn");
}

TEST(MessagesRequest, RefusalsNameTheField) {
  auto refused = [](bj::object body) {
    auto parsed = sandboxd::model::parse_messages_request(std::move(body), any_container_id);
    return parsed.has_value() ? std::string() : parsed.error().message;
  };
  const bj::array messages{bj::object{{"role", "user"}, {"content", "hi"}}};
  EXPECT_NE(refused({{"max_tokens", 10}, {"messages", messages}}).find("model"), std::string::npos);
  EXPECT_NE(refused({{"model", "m"}, {"messages", messages}}).find("max_tokens"), std::string::npos);
  EXPECT_NE(refused({{"model", "m"}, {"max_tokens", 10}}).find("messages"), std::string::npos);
  EXPECT_EQ(refused({{"model", "m"}, {"max_tokens", 10}, {"messages", messages}}), "");
}

TEST(UpstreamErrors, StatusesMapAsTheClientExpects) {
  using sandboxd::messages::anthropic_error;
  using sandboxd::model::upstream_http_error;
  auto overloaded =
      upstream_http_error(529, R"({"type":"error","error":{"type":"overloaded_error","message":"x"}})");
  EXPECT_EQ(anthropic_error(overloaded.kind).status, 529u);
  auto bad =
      upstream_http_error(400, R"({"type":"error","error":{"type":"invalid_request_error","message":"no"}})");
  EXPECT_EQ(anthropic_error(bad.kind).status, 400u) << "a 4xx is passed on";
  EXPECT_EQ(bad.message, "no");
  auto broken = upstream_http_error(500, "<html>oops</html>");
  EXPECT_EQ(anthropic_error(broken.kind).status, 502u) << "anything else is a bad gateway";
}

// Each of Anthropic's errors (https://docs.anthropic.com/en/api/errors) reaches the
// client with the status and type the upstream answered: a 4xx as it is, a 529 as it
// is, any other 5xx as a 502 api_error (the upstream failed, not the request).
TEST(UpstreamErrors, EachAnthropicErrorReachesTheClientAsTheUpstreamSaidIt) {
  using sandboxd::messages::anthropic_error;
  using sandboxd::model::upstream_http_error;
  struct Case {
    long status;
    std::string type;
    unsigned client_status;
    std::string client_type;
  };
  const Case cases[] = {
      {400, "invalid_request_error", 400, "invalid_request_error"},
      {401, "authentication_error", 401, "authentication_error"},
      {402, "billing_error", 402, "billing_error"},
      {403, "permission_error", 403, "permission_error"},
      {404, "not_found_error", 404, "not_found_error"},
      {413, "request_too_large", 413, "request_too_large"},
      {429, "rate_limit_error", 429, "rate_limit_error"},
      {500, "api_error", 502, "api_error"},
      {504, "timeout_error", 502, "api_error"},
      {529, "overloaded_error", 529, "overloaded_error"},
  };
  for (const auto& c : cases) {
    const std::string body = R"({"type":"error","error":{"type":")" + c.type + R"(","message":"m"}})";
    const auto shape = anthropic_error(upstream_http_error(c.status, body).kind);
    EXPECT_EQ(shape.status, c.client_status) << c.status << " " << c.type;
    EXPECT_EQ(shape.type, c.client_type) << c.status << " " << c.type;
  }
  // Without a body the status alone says it.
  EXPECT_EQ(anthropic_error(upstream_http_error(401, "").kind).type, "authentication_error");
  EXPECT_EQ(anthropic_error(upstream_http_error(429, "").kind).type, "rate_limit_error");
}

}  // namespace
