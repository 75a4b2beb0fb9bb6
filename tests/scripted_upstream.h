// A scripted upstream model for tests and benchmarks: a real HTTP server on loopback
// that speaks the Anthropic Messages protocol (JSON answers and SSE streams) and plays
// a queue of steps, one per POST /v1/messages, recording every request it receives.
//
// A step (JSON object) is one of:
//   {"message": {...}}                  a Messages response; streamed as SSE when the
//                                       request asks, its text and tool input split
//                                       into small deltas and its bytes into `chunk`-
//                                       sized writes (default 7); a text block's
//                                       citations as citations_delta events
//   {"status": 529, "error": {"type": "overloaded_error", "message": "..."}}
//   {"hang_ms": 5000}                   read the request, answer nothing for that long
//   {"close": true}                     read the request, close the connection
//   {"raw_sse": "..."}                  200 text/event-stream with exactly these bytes
// Options on a message step: "delay_ms" (before answering), "stall_ms" with
// "stall_after_block": K (stream blocks 0..K, then stall, watching for the client to
// go away; counted in cancelled_streams()).
// With the queue empty it answers 500. Control endpoints (for clients in other
// processes): POST /_script (a JSON array of steps, replacing the queue), GET
// /_requests (the recorded request bodies), GET /_stats.
#pragma once

#include "loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::testing {

class ScriptedUpstream : public LoopbackServer {
 public:
  explicit ScriptedUpstream(uint16_t port = 0) : LoopbackServer(port, "scripted upstream") {
    start_accepting();
  }
  ~ScriptedUpstream() override { stop_serving(); }

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port()); }

  void push(boost::json::object step) {
    std::lock_guard lock(mutex_);
    steps_.push_back(std::move(step));
  }
  void push_message(boost::json::object message) { push({{"message", std::move(message)}}); }
  std::vector<boost::json::object> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  size_t pending_steps() {
    std::lock_guard lock(mutex_);
    return steps_.size();
  }
  int cancelled_streams() const { return cancelled_streams_; }

  // Helpers for scripts.
  static boost::json::object text_block(const std::string& text) {
    return {{"type", "text"}, {"text", text}};
  }
  static boost::json::object tool_use(const std::string& id, const std::string& name,
                                      boost::json::object input) {
    return {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", std::move(input)}};
  }
  static boost::json::object message(boost::json::array content, const std::string& stop_reason,
                                     int input_tokens = 10, int output_tokens = 5) {
    return {{"content", std::move(content)},
            {"stop_reason", stop_reason},
            {"usage", {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}}}};
  }

 private:
  struct Request {
    std::string method, target, body;
  };

  static bool write_all(int fd, std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads one request; false at the end of the connection.
  static bool read_request(int fd, std::string& buffer, Request& out) {
    size_t header_end;
    while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos) {
      char chunk[65536];
      ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    std::string head = buffer.substr(0, header_end);
    size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
    out.method = head.substr(0, sp1);
    out.target = head.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t length = 0;
    std::string lower = head;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (auto p = lower.find("\r\ncontent-length:"); p != std::string::npos)
      length = std::stoul(lower.substr(p + 17));
    buffer.erase(0, header_end + 4);
    while (buffer.size() < length) {
      char chunk[65536];
      ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    out.body = buffer.substr(0, length);
    buffer.erase(0, length);
    return true;
  }

  static std::string response(int status, const std::string& type, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  // Waits up to `ms` for the peer to close; true when it did.
  static bool wait_for_close(int fd, int ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN | POLLRDHUP, 0};
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now())
              .count());
      if (poll(&p, 1, std::max(left, 1)) > 0) {
        char c;
        if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) return true;
      }
    }
    return false;
  }

  void serve_connection(int fd) override {
    std::string buffer;
    Request request;
    while (!stopping() && read_request(fd, buffer, request)) {
      if (!handle(fd, request)) break;
    }
  }

  // Answers one request; false to close the connection.
  bool handle(int fd, const Request& request) {
    namespace json = boost::json;
    if (request.target == "/_script") {
      json::value steps = json::parse(request.body);
      std::lock_guard lock(mutex_);
      steps_.clear();
      for (auto& s : steps.as_array()) steps_.push_back(s.as_object());
      requests_.clear();
      return write_all(fd, response(200, "application/json", "{}"));
    }
    if (request.target == "/_requests") {
      json::array all;
      {
        std::lock_guard lock(mutex_);
        for (auto& r : requests_) all.push_back(r);
      }
      return write_all(fd, response(200, "application/json", json::serialize(all)));
    }
    if (request.target == "/_stats") {
      json::object stats{{"cancelled_streams", cancelled_streams_.load()}, {"requests", requests_.size()}};
      return write_all(fd, response(200, "application/json", json::serialize(stats)));
    }
    boost::system::error_code ec;
    json::value body = json::parse(request.body, ec);
    json::object recorded = !ec && body.is_object() ? body.as_object() : json::object{{"_raw", request.body}};
    recorded["_path"] = request.target;
    json::object step;
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(recorded);
      if (!steps_.empty()) {
        step = std::move(steps_.front());
        steps_.pop_front();
      }
    }
    if (step.empty())
      return write_all(
          fd, response(500, "application/json",
                       R"({"type":"error","error":{"type":"api_error","message":"script exhausted"}})"));
    if (auto* delay = step.if_contains("delay_ms"))
      std::this_thread::sleep_for(std::chrono::milliseconds(delay->to_number<int64_t>()));
    if (auto* hang = step.if_contains("hang_ms")) {
      if (wait_for_close(fd, static_cast<int>(hang->to_number<int64_t>()))) ++cancelled_streams_;
      return false;
    }
    if (step.contains("close")) return false;
    if (auto* raw = step.if_contains("raw_sse")) {
      std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
      write_all(fd, head + std::string(raw->as_string()));
      return false;
    }
    if (auto* status = step.if_contains("status")) {
      json::object error{{"type", "error"},
                         {"error", step.contains("error") ? step.at("error") : json::value(json::object{})}};
      return write_all(fd, response(static_cast<int>(status->to_number<int64_t>()), "application/json",
                                    json::serialize(error)));
    }
    json::object message = step.at("message").as_object();
    static std::atomic<int> counter{0};
    if (!message.contains("id")) message["id"] = "msg_upstream_" + std::to_string(++counter);
    message["type"] = "message";
    message["role"] = "assistant";
    if (!message.contains("model"))
      message["model"] = body.is_object() ? body.as_object()["model"] : json::value("m");
    if (!message.contains("stop_sequence")) message["stop_sequence"] = nullptr;
    bool stream =
        body.is_object() && body.as_object().contains("stream") && body.as_object().at("stream").as_bool();
    if (!stream) return write_all(fd, response(200, "application/json", json::serialize(message)));
    return stream_message(fd, step, message);
  }

  bool stream_message(int fd, const boost::json::object& step, boost::json::object message) {
    namespace json = boost::json;
    const size_t chunk =
        step.contains("chunk") ? static_cast<size_t>(step.at("chunk").to_number<int64_t>()) : 7;
    const int stall_after = step.contains("stall_after_block")
                                ? static_cast<int>(step.at("stall_after_block").to_number<int64_t>())
                                : -1;
    const int stall_ms =
        step.contains("stall_ms") ? static_cast<int>(step.at("stall_ms").to_number<int64_t>()) : 0;
    if (!write_all(
            fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"))
      return false;
    auto send = [&](const std::string& bytes) {
      // Odd-sized pieces, each its own HTTP chunk: events and lines split anywhere.
      for (size_t at = 0; at < bytes.size(); at += chunk) {
        std::string piece = bytes.substr(at, chunk);
        char size[32];
        snprintf(size, sizeof size, "%zx\r\n", piece.size());
        if (!write_all(fd, size + piece + "\r\n")) return false;
      }
      return true;
    };
    auto event = [&](const std::string& name, const json::object& data) {
      return send("event: " + name + "\r\ndata: " + json::serialize(data) + "\r\n\r\n");
    };
    json::array content = message["content"].as_array();
    json::object usage = message["usage"].as_object();
    json::object start = message;
    start["content"] = json::array{};
    start["stop_reason"] = nullptr;
    start["usage"] = {{"input_tokens", usage["input_tokens"]}, {"output_tokens", 1}};
    if (!event("message_start", {{"type", "message_start"}, {"message", start}})) return false;
    if (!send(": a comment line\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n")) return false;
    for (size_t i = 0; i < content.size(); ++i) {
      json::object block = content[i].as_object();
      std::string type(block["type"].as_string());
      json::object shown = block;
      std::vector<json::object> deltas;
      auto pieces = [](const std::string& text, size_t n) {
        std::vector<std::string> out;
        for (size_t at = 0; at < text.size(); at += n) out.push_back(text.substr(at, n));
        return out;
      };
      if (type == "text") {
        shown["text"] = "";
        // As Anthropic streams a cited text: each citation a citations_delta before the text.
        if (auto* citations = block.if_contains("citations"); citations && citations->is_array()) {
          shown.erase("citations");
          for (const auto& citation : citations->as_array())
            deltas.push_back({{"type", "citations_delta"}, {"citation", citation}});
        }
        for (auto& p : pieces(std::string(block["text"].as_string()), 4))
          deltas.push_back({{"type", "text_delta"}, {"text", p}});
      } else if (type == "tool_use") {
        shown["input"] = json::object{};
        for (auto& p : pieces(json::serialize(block["input"]), 5))
          deltas.push_back({{"type", "input_json_delta"}, {"partial_json", p}});
      }
      const auto index = static_cast<int64_t>(i);
      if (!event("content_block_start",
                 {{"type", "content_block_start"}, {"index", index}, {"content_block", shown}}))
        return false;
      for (auto& d : deltas)
        if (!event("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", d}}))
          return false;
      if (!event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}})) return false;
      if (static_cast<int>(i) == stall_after) {
        if (wait_for_close(fd, stall_ms)) {
          ++cancelled_streams_;
          return false;
        }
      }
    }
    if (!event("message_delta",
               {{"type", "message_delta"},
                {"delta", {{"stop_reason", message["stop_reason"]}, {"stop_sequence", nullptr}}},
                {"usage", {{"output_tokens", usage["output_tokens"]}}}}))
      return false;
    if (!event("message_stop", {{"type", "message_stop"}})) return false;
    return write_all(fd, "0\r\n\r\n");
  }

  std::mutex mutex_;
  std::deque<boost::json::object> steps_;
  std::vector<boost::json::object> requests_;
  std::atomic<int> cancelled_streams_{0};
};

}  // namespace sandboxd::testing
