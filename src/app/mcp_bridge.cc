#include "app/mcp_bridge.h"

#include <curl/curl.h>

#include <atomic>
#include <boost/json.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/base64.h"

namespace sandboxd::app {
namespace {

namespace json = boost::json;

// What every request's thread shares.
struct Bridge {
  std::string endpoint, token;

  std::mutex mutex;  // guards the two below and stdout
  std::string session_id, protocol_version;

  std::mutex threads_mutex;
  std::condition_variable threads_done;
  int running = 0;

  // The stateless revision's requests in flight, by id (their JSON text): over HTTP,
  // closing a request's stream is its cancellation, so a client's
  // notifications/cancelled for one (stdio's way) aborts its transfer here.
  std::mutex in_flight_mutex;
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> in_flight;

  // One message to the client: one line of stdout.
  void emit(std::string_view message) {
    std::lock_guard lock(mutex);
    std::fwrite(message.data(), 1, message.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
};

// The response to a request that the server could not answer with a JSON-RPC message.
std::string error_for(const json::value& id, std::string message) {
  return json::serialize(json::object{
      {"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", -32000}, {"message", std::move(message)}}}});
}

// One exchange: the message out, the server's messages back as they arrive.
struct Exchange {
  Bridge& bridge;
  json::value request_id = nullptr;  // null for a notification or a response
  bool is_initialize = false;
  long status = 0;
  std::string content_type, session_id;
  std::string body;        // a JSON answer (or an error's body)
  std::string sse_buffer;  // an event stream's bytes not yet split into lines
  std::string event, data;
  bool answered = false;  // the response to request_id went out
  CURL* curl = nullptr;   // while it is performed
  // A 2026-07-28 message: the headers that mirror its body (no session's).
  std::vector<std::string> modern_headers;
  std::shared_ptr<std::atomic<bool>> cancelled;  // set: the transfer is aborted

  bool streaming() const {
    return status == 200 && content_type.find("text/event-stream") != std::string::npos;
  }

  // A message from the server: the negotiated version noted, then passed on.
  void deliver(std::string_view text) {
    boost::system::error_code ec;
    json::value message = json::parse(text, ec);
    if (ec) return;  // not JSON: nothing a client could use
    if (auto* object = message.if_object()) {
      if (auto* id = object->if_contains("id"); id && !object->contains("method") && *id == request_id) {
        answered = true;
        if (is_initialize)
          if (auto* result = object->if_contains("result"); result && result->is_object())
            if (auto* version = result->as_object().if_contains("protocolVersion");
                version && version->is_string()) {
              std::lock_guard lock(bridge.mutex);
              bridge.protocol_version = std::string(version->as_string());
            }
      }
    }
    bridge.emit(text);
  }

  // Server-sent events: each `data` of an event of type message (or none) is a message.
  void feed_sse(std::string_view bytes) {
    sse_buffer.append(bytes);
    size_t start = 0;
    for (size_t end; (end = sse_buffer.find('\n', start)) != std::string::npos; start = end + 1) {
      std::string_view line(sse_buffer.data() + start, end - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) {
        if (!data.empty() && (event.empty() || event == "message")) deliver(data);
        event.clear();
        data.clear();
        continue;
      }
      if (line.front() == ':') continue;  // a comment (keep-alive)
      auto colon = line.find(':');
      std::string_view field = line.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (field == "data") {
        if (!data.empty()) data += '\n';
        data.append(value);
      } else if (field == "event") {
        event = std::string(value);
      }
    }
    sse_buffer.erase(0, start);
  }
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  std::string_view line(data, size * count);
  auto colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
      value.remove_suffix(1);
    if (name == "content-type") exchange->content_type = std::string(value);
    if (name == "mcp-session-id") exchange->session_id = std::string(value);
  } else if (line.rfind("HTTP/", 0) == 0) {
    exchange->content_type.clear();  // a new response (after a 100 Continue)
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  if (exchange->status == 0) curl_easy_getinfo(exchange->curl, CURLINFO_RESPONSE_CODE, &exchange->status);
  std::string_view bytes(data, size * count);
  if (exchange->streaming())
    exchange->feed_sse(bytes);
  else
    exchange->body.append(bytes);
  return size * count;
}

// Aborts a transfer whose request the client cancelled (checked about once a second,
// and whenever data moves).
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::atomic<bool>*>(user)->load() ? 1 : 0;
}

// A header value as MCP 2026-07-28 carries it: as is when it is plain visible ASCII,
// else (or when it looks like the encoded form) =?base64?{UTF-8 as base64}?=.
std::string header_value(std::string_view value) {
  bool plain = !value.empty() && value.front() != ' ' && value.back() != ' ' &&
               !(value.starts_with("=?base64?") && value.ends_with("?="));
  for (unsigned char c : value)
    if (c < 0x20 || c > 0x7e) plain = false;
  if (plain) return std::string(value);
  return "=?base64?" + base64_encode(value) + "?=";
}

// The headers a 2026-07-28 message mirrors from its body (its version, method, and tool
// or resource); none for a message of a session's revision.
std::vector<std::string> modern_headers_of(const json::object& message) {
  const auto* method = message.if_contains("method");
  const auto* params = message.if_contains("params");
  if (!method || !method->is_string() || !params || !params->is_object()) return {};
  const auto* meta = params->as_object().if_contains("_meta");
  if (!meta || !meta->is_object()) return {};
  const auto* version = meta->as_object().if_contains("io.modelcontextprotocol/protocolVersion");
  if (!version || !version->is_string()) return {};
  std::vector<std::string> headers{"MCP-Protocol-Version: " + header_value(version->as_string()),
                                   "Mcp-Method: " + header_value(method->as_string())};
  const char* name_field = method->as_string() == "tools/call"       ? "name"
                           : method->as_string() == "resources/read" ? "uri"
                           : method->as_string() == "prompts/get"    ? "name"
                                                                     : nullptr;
  if (name_field)
    if (const auto* name = params->as_object().if_contains(name_field); name && name->is_string())
      headers.push_back("Mcp-Name: " + header_value(name->as_string()));
  return headers;
}

// Sends one request with the session's headers; `method` POST (with `payload`) or DELETE.
CURLcode perform(Bridge& bridge, const char* method, const std::string& payload, Exchange& exchange) {
  CURL* curl = curl_easy_init();
  if (!curl) return CURLE_FAILED_INIT;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, ("Authorization: Bearer " + bridge.token).c_str());
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Accept: application/json, text/event-stream");
  if (!exchange.modern_headers.empty()) {
    for (const auto& header : exchange.modern_headers) headers = curl_slist_append(headers, header.c_str());
  } else {
    std::lock_guard lock(bridge.mutex);
    if (!bridge.session_id.empty())
      headers = curl_slist_append(headers, ("Mcp-Session-Id: " + bridge.session_id).c_str());
    if (!bridge.protocol_version.empty())
      headers = curl_slist_append(headers, ("MCP-Protocol-Version: " + bridge.protocol_version).c_str());
  }
  if (exchange.cancelled) {
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, exchange.cancelled.get());
  }
  curl_easy_setopt(curl, CURLOPT_URL, bridge.endpoint.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  if (std::string_view(method) == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &exchange);
  exchange.curl = curl;
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &exchange);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &exchange.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return rc;
}

void relay(std::shared_ptr<Bridge> bridge, std::string line) {
  Exchange exchange{*bridge};
  boost::system::error_code ec;
  json::value message = json::parse(line, ec);
  std::string in_flight_key;
  if (!ec)
    if (auto* object = message.if_object()) {
      exchange.modern_headers = modern_headers_of(*object);
      auto* method = object->if_contains("method");
      if (auto* id = object->if_contains("id"); id && method) {
        exchange.request_id = *id;
        exchange.is_initialize = method->is_string() && method->as_string() == "initialize";
        if (!exchange.modern_headers.empty()) {
          in_flight_key = json::serialize(*id);
          exchange.cancelled = std::make_shared<std::atomic<bool>>(false);
          std::lock_guard lock(bridge->in_flight_mutex);
          bridge->in_flight[in_flight_key] = exchange.cancelled;
        }
      } else if (method && method->is_string() && method->as_string() == "notifications/cancelled") {
        // A stateless request's cancellation: its transfer is aborted here (the server
        // stops it when the stream closes). One of a session goes to the server.
        const auto* params = object->if_contains("params");
        const auto* request =
            params && params->is_object() ? params->as_object().if_contains("requestId") : nullptr;
        if (request) {
          std::lock_guard lock(bridge->in_flight_mutex);
          if (auto found = bridge->in_flight.find(json::serialize(*request));
              found != bridge->in_flight.end()) {
            found->second->store(true);
            return;
          }
        }
      }
    }
  CURLcode rc = perform(*bridge, "POST", line, exchange);
  if (!in_flight_key.empty()) {
    std::lock_guard lock(bridge->in_flight_mutex);
    bridge->in_flight.erase(in_flight_key);
  }
  // A cancelled request gets no response, as the protocol asks.
  if (exchange.cancelled && exchange.cancelled->load()) return;
  if (!exchange.session_id.empty() && exchange.is_initialize) {
    std::lock_guard lock(bridge->mutex);
    bridge->session_id = exchange.session_id;
  }
  const bool is_request = !exchange.request_id.is_null();
  if (rc != CURLE_OK) {
    std::fprintf(stderr, "sandboxd mcp: %s: %s\n", bridge->endpoint.c_str(), curl_easy_strerror(rc));
    if (is_request && !exchange.answered)
      bridge->emit(error_for(exchange.request_id,
                             std::string("The server could not be reached: ") + curl_easy_strerror(rc)));
    return;
  }
  if (exchange.streaming()) {
    if (is_request && !exchange.answered) exchange.feed_sse("\n\n");  // an event cut off at the end
    return;
  }
  if (!exchange.body.empty()) {
    boost::system::error_code parse_error;
    json::value answer = json::parse(exchange.body, parse_error);
    // The server's JSON-RPC answer, its id made the request's where the server could
    // not read one (an error about the message itself).
    const bool json_rpc = answer.is_array() || (answer.is_object() && answer.as_object().contains("jsonrpc"));
    if (!parse_error && json_rpc) {
      if (auto* object = answer.if_object(); object && is_request && object->contains("error")) {
        auto* id = object->if_contains("id");
        if (!id || id->is_null()) (*object)["id"] = exchange.request_id;
      }
      if (is_request || exchange.status < 400)
        exchange.deliver(json::serialize(answer));
      else
        std::fprintf(stderr, "sandboxd mcp: HTTP %ld: %s\n", exchange.status, exchange.body.c_str());
      return;
    }
  }
  if (exchange.status >= 400) {
    std::fprintf(stderr, "sandboxd mcp: HTTP %ld: %s\n", exchange.status, exchange.body.c_str());
    if (is_request)
      bridge->emit(error_for(exchange.request_id, "HTTP " + std::to_string(exchange.status) + ": " +
                                                      exchange.body.substr(0, 500)));
  }
}

std::string endpoint_of(std::string url) {
  // A server's address alone means its /mcp endpoint.
  const auto scheme = url.find("://");
  const auto path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (path == std::string::npos) return url + "/mcp";
  if (path == url.size() - 1) return url + "mcp";
  return url;
}

}  // namespace

int mcp_bridge(const McpBridgeOptions& options) {
  const char* token = std::getenv(options.token_env.c_str());
  if (!token || !*token) {
    std::fprintf(stderr, "sandboxd mcp: set %s to your sandboxd API token\n", options.token_env.c_str());
    return 2;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  auto bridge = std::make_shared<Bridge>();
  bridge->endpoint = endpoint_of(options.url);
  bridge->token = token;
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    {
      std::lock_guard lock(bridge->threads_mutex);
      ++bridge->running;
    }
    std::thread([bridge, line = std::move(line)]() mutable {
      relay(bridge, std::move(line));
      std::lock_guard lock(bridge->threads_mutex);
      if (--bridge->running == 0) bridge->threads_done.notify_all();
    }).detach();
    line.clear();
  }
  // The client closed stdin: end the session (the server stops what still runs), then
  // let the answers in flight finish.
  std::string session;
  {
    std::lock_guard lock(bridge->mutex);
    session = bridge->session_id;
  }
  if (!session.empty()) {
    Exchange exchange{*bridge};
    perform(*bridge, "DELETE", "", exchange);
  }
  std::unique_lock lock(bridge->threads_mutex);
  bridge->threads_done.wait(lock, [&] { return bridge->running == 0; });
  return 0;
}

}  // namespace sandboxd::app
