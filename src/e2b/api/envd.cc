// envd, E2B's agent inside each sandbox, as E2B's SDKs reach it with E2B_SANDBOX_URL set
// to http://HOST:PORT/e2b/sandbox (docs/e2b.md): the sandbox and the port are named by
// headers (e2b/api/common.h), the process and filesystem services are Connect RPC with
// the JSON codec (e2b/api/connect_rpc.h), and /files moves file bodies over plain HTTP.
//
// Processes run in the sandbox (e2b/service/processes.h); the filesystem calls and
// /files work on the host side of the container's folders with sandboxd's path rules
// and symlink safety (service/sandbox_files.h, store/file_store.h). E2B's home,
// /home/user, is the workspace: in the sandbox a symlink to /home/agent/workspace.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <cctype>
#include <charconv>
#include <csignal>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "api/file_transfer.h"
#include "api/gzip_body.h"
#include "base/base64.h"
#include "base/blocking.h"
#include "base/utf8.h"
#include "e2b/api/common.h"
#include "e2b/api/connect_rpc.h"
#include "e2b/service/processes.h"
#include "server/auth.h"
#include "service/directory_watches.h"
#include "service/owner_quotas.h"
#include "service/sandbox_files.h"
#include "service/store_call.h"
#include "store/multipart.h"

namespace sandboxd::e2b {

using api::gzip_encoded;
using api::GzipBody;
using api::receive_body;
using service::ContainerFiles;
namespace {

namespace json = boost::json;
using service::FileEntry;

constexpr std::string_view kHome = "/home/user";
// One multipart upload writes at most this many files.
constexpr size_t kMaxFilesPerUpload = 1000;

// The request messages' sizes: what each call can need, no more. A process's start is a
// command, its arguments and variables, which the kernel takes at most 2 MiB of in all
// (ARG_MAX at the default stack limit; one argument at most 128 KiB): 1 MiB of JSON
// leaves room for escapes. A stdin write is at most what may wait for a process
// (Process::kStdinQueue), in base64, and the selector.
constexpr size_t kStartMessage = 1u << 20;
constexpr size_t kInputMessage = e2b::Process::kStdinQueue / 3 * 4 + 4096;

// ---------------------------------------------------------------------------------
// Paths: E2B's home is the workspace.

std::string to_sandbox_path(std::string_view path) {
  if (path == kHome || path == "~") return std::string(kWorkspaceMount);
  if (path.starts_with(std::string(kHome) + "/"))
    return std::string(kWorkspaceMount) + std::string(path.substr(kHome.size()));
  if (path.starts_with("~/")) return std::string(kWorkspaceMount) + std::string(path.substr(1));
  return std::string(path);  // relative paths are taken from the workspace too
}

std::string to_e2b_path(std::string_view sandbox_path) {
  if (sandbox_path == kWorkspaceMount) return std::string(kHome);
  if (sandbox_path.starts_with(std::string(kWorkspaceMount) + "/"))
    return std::string(kHome) + std::string(sandbox_path.substr(kWorkspaceMount.size()));
  return std::string(sandbox_path);
}

// ---------------------------------------------------------------------------------
// Protobuf's JSON mapping of the messages (fields in lowerCamelCase; 64-bit integers
// and enums may come as strings or numbers).

const json::object* object_field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_object() ? &v->as_object() : nullptr;
}

Result<std::optional<std::string>> string_field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::optional<std::string>{};
  if (!v->is_string()) return ApiError::invalid_request("'" + std::string(key) + "' must be a string");
  return std::optional<std::string>{std::string(v->as_string())};
}

std::optional<int64_t> integer_of(const json::value& v) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64() && v.as_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v.as_uint64());
  if (v.is_string()) {
    const auto& s = v.as_string();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return value;
  }
  return std::nullopt;
}

std::string timestamp(int64_t unix_ns) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(unix_ns % 1'000'000'000));
  return buf;
}

const char* file_type(FileEntry::Type type) {
  switch (type) {
    case FileEntry::Type::kFile:
      return "FILE_TYPE_FILE";
    case FileEntry::Type::kDirectory:
      return "FILE_TYPE_DIRECTORY";
    case FileEntry::Type::kSymlink:
      return "FILE_TYPE_SYMLINK";
    default:
      return "FILE_TYPE_UNSPECIFIED";
  }
}

// EntryInfo. Files belong to the sandbox's one user, which E2B's clients know as "user".
json::object entry_info(const FileEntry& e) {
  json::object o{{"name", e.name},
                 {"type", file_type(e.type)},
                 {"path", to_e2b_path(e.path)},
                 {"size", std::to_string(e.size)},
                 {"mode", e.mode},
                 {"permissions", e.permissions},
                 {"owner", "user"},
                 {"group", "user"},
                 {"modifiedTime", timestamp(e.mtime_ns)}};
  if (e.symlink_target) o["symlinkTarget"] = to_e2b_path(*e.symlink_target);
  if (!e.metadata.empty()) {
    json::object metadata;
    for (const auto& [key, value] : e.metadata) metadata[key] = value;
    o["metadata"] = std::move(metadata);
  }
  return o;
}

// ---------------------------------------------------------------------------------
// File metadata: an upload's `X-Metadata-<key>: <value>` headers, kept as the file's
// extended attributes `user.e2b.<key>` (as envd keeps them, so code in the sandbox sees
// them with getfattr too) and answered in EntryInfo. Bounded as envd bounds them: keys
// and values printable ASCII, a key at most 246 bytes (the kernel's 255 for a name,
// less the prefix), all of a file's at most 4096 bytes with the prefix counted per key
// (one file system block: what ext4 keeps beside the inode).
constexpr std::string_view kMetadataHeaderPrefix = "x-metadata-";
constexpr size_t kMaxMetadataKey = 246;
constexpr size_t kMaxMetadataBytes = 4096;

struct FileMetadata {
  std::map<std::string, std::string> entries;  // key (lower case) -> value
  std::vector<std::pair<std::string, std::string>> attributes() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [key, value] : entries)
      out.emplace_back(std::string(service::kMetadataAttributePrefix) + key, value);
    return out;
  }
};

bool printable_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

// The metadata an upload's headers give its files (the first of a repeated key wins).
Result<FileMetadata> metadata_of_headers(const RequestContext& ctx) {
  FileMetadata metadata;
  size_t bytes = 0;
  for (const auto& field : ctx.header()) {
    const std::string_view name = field.name_string();
    if (name.size() < kMetadataHeaderPrefix.size() ||
        !boost::beast::iequals(name.substr(0, kMetadataHeaderPrefix.size()), kMetadataHeaderPrefix))
      continue;
    std::string key(name.substr(kMetadataHeaderPrefix.size()));
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string_view value = field.value();
    if (key.empty()) return ApiError::invalid_request("A metadata header needs a key: X-Metadata-<key>");
    if (key.size() > kMaxMetadataKey)
      return ApiError::invalid_request("The metadata key '" + key.substr(0, 64) + "...' is longer than " +
                                       std::to_string(kMaxMetadataKey) + " bytes");
    if (!printable_ascii(key) || !printable_ascii(value))
      return ApiError::invalid_request("The metadata of key '" + to_valid_utf8(key.substr(0, 64)) +
                                       "' is not printable US-ASCII");
    if (metadata.entries.contains(key)) continue;
    bytes += service::kMetadataAttributePrefix.size() + key.size() + value.size();
    if (bytes > kMaxMetadataBytes)
      return ApiError::invalid_request("A file's metadata is at most " + std::to_string(kMaxMetadataBytes) +
                                       " bytes (keys, values and 9 bytes a key)");
    metadata.entries.emplace(std::move(key), std::string(value));
  }
  return metadata;
}

// ---------------------------------------------------------------------------------
// Users: envd runs a process as the user an `Authorization: Basic user:` names. Here
// both of E2B's users are sandboxd's one unprivileged user (docs/e2b.md).

Result<void> check_user_name(std::string_view name) {
  if (name.empty() || name == "user" || name == "root") return {};
  return ApiError::authentication(
      "Unknown user '" + std::string(name.substr(0, 64)) +
      "' (this server has 'user' and 'root', both the sandbox's unprivileged user)");
}

Result<void> check_user(const RequestContext& ctx) {
  const auto authorization = ctx.header_value(http::field::authorization);
  if (authorization.size() < 6 || !boost::beast::iequals(authorization.substr(0, 6), "Basic ")) return {};
  auto decoded = base64_decode(authorization.substr(6));
  if (!decoded) return ApiError::authentication("The Authorization header's user is not valid base64");
  return check_user_name(std::string_view(*decoded).substr(0, decoded->find(':')));
}

// ---------------------------------------------------------------------------------
// The process service.

// The Keepalive-Ping-Interval a client asks for (seconds), within reason.
std::chrono::milliseconds keepalive_of(const RequestContext& ctx) {
  const auto text = ctx.header_value("keepalive-ping-interval");
  int seconds = 50;
  if (!text.empty()) std::from_chars(text.data(), text.data() + text.size(), seconds);
  return std::chrono::seconds(std::clamp(seconds, 1, 300));
}

json::object keepalive_event() {
  json::object event;
  event["keepalive"] = json::object{};
  return json::object{{"event", std::move(event)}};
}

json::object start_event(uint32_t pid) { return {{"event", {{"start", {{"pid", pid}}}}}}; }

json::object end_event(const ProcessOutput& end) {
  json::object e;
  std::string status;
  if (end.sandbox_stopped) {
    status = "sandbox stopped";
  } else if (end.killed_by) {
    status = *end.killed_by == SIGKILL ? "signal: killed" : "signal: " + std::to_string(*end.killed_by);
  } else {
    status = "exit status " + std::to_string(end.exit_code);
  }
  e["exitCode"] = end.exit_code;
  e["exited"] = !end.sandbox_stopped && !end.killed_by;
  e["status"] = status;
  if (end.timed_out)
    e["error"] = "the process was killed at its timeout (Connect-Timeout-Ms)";
  else if (end.sandbox_stopped)
    e["error"] = "the sandbox stopped while the process ran";
  else if (end.killed_by || end.exit_code != 0)
    e["error"] = status;
  return {{"event", {{"end", std::move(e)}}}};
}

json::object data_event(const ProcessOutput& piece) {
  const char* stream = piece.kind == ProcessOutput::Kind::kStdout ? "stdout"
                       : piece.kind == ProcessOutput::Kind::kPty  ? "pty"
                                                                  : "stderr";
  return {{"event", {{"data", {{stream, base64_encode(piece.data)}}}}}};
}

std::string message(const json::object& o) { return connect_rpc::envelope(json::serialize(o)); }

// The events of a process to its reader: start, data as it comes, keep-alives while it
// is quiet, the end. A client that goes away leaves the process running (as envd does).
server::StreamResponse event_stream(std::shared_ptr<ProcessReader> reader, uint32_t pid,
                                    std::chrono::milliseconds keepalive, std::weak_ptr<Container> container) {
  server::StreamResponse res{connect_rpc::stream_header(), nullptr};
  res.first_chunk = message(start_event(pid));  // in the header's packet
  res.produce = [reader, keepalive, container](server::ChunkWriter& out) -> asio::awaitable<void> {
    for (;;) {
      auto piece = co_await reader->next(keepalive);
      if (!piece) {
        if (!co_await out.write(message(keepalive_event()))) co_return;
        continue;
      }
      auto held = container.lock();
      if (piece->kind == ProcessOutput::Kind::kEnd && (piece->sandbox_stopped || (held && held->deleted))) {
        // The sandbox went (killed, paused, at its end of life): with it envd, and the
        // connection with envd, as E2B's clients see it. The SDKs then ask /health, and
        // a sandbox that is gone raises their TimeoutError ("killed or reached its end
        // of life"), not an exit of the command.
        out.abort();
        co_return;
      }
      if (piece->kind == ProcessOutput::Kind::kEnd) {
        // The end event, the stream's end and the body's, in one write.
        co_await out.write_last(message(end_event(*piece)) + connect_rpc::end_of_stream(nullptr));
        co_return;
      }
      if (!co_await out.write(message(data_event(*piece)))) co_return;
    }
  };
  return res;
}

asio::awaitable<Result<ProcessConfig>> process_config(const json::object& request) {
  ProcessConfig config;
  const auto* process = object_field(request, "process");
  if (!process) co_return ApiError::invalid_request("'process' is required");
  auto cmd = string_field(*process, "cmd");
  if (!cmd) co_return cmd.error();
  if (!*cmd || (*cmd)->empty()) co_return ApiError::invalid_request("'process.cmd' is required");
  config.cmd = **cmd;
  if (const auto* args = process->if_contains("args"); args && !args->is_null()) {
    if (!args->is_array()) co_return ApiError::invalid_request("'process.args' must be an array of strings");
    for (const auto& arg : args->as_array()) {
      if (!arg.is_string()) co_return ApiError::invalid_request("'process.args' must be an array of strings");
      config.args.emplace_back(arg.as_string());
    }
  }
  if (const auto* envs = process->if_contains("envs"); envs && !envs->is_null()) {
    if (!envs->is_object())
      co_return ApiError::invalid_request("'process.envs' must be an object of strings");
    for (const auto& [name, value] : envs->as_object()) {
      if (!value.is_string())
        co_return ApiError::invalid_request("'process.envs' must be an object of strings");
      config.envs[std::string(name)] = std::string(value.as_string());
    }
  }
  auto cwd = string_field(*process, "cwd");
  if (!cwd) co_return cwd.error();
  if (*cwd && !(*cwd)->empty()) config.cwd = **cwd;
  co_return config;
}

// PTY: {"size": {"cols": N, "rows": N}}, each a window dimension (a zero one is left
// out in protobuf's JSON, and is 0 as envd passes it on).
Result<runtime::protocol::TerminalSize> terminal_size(const json::value& pty) {
  if (!pty.is_object()) return ApiError::invalid_request("'pty' must be an object with a 'size'");
  runtime::protocol::TerminalSize size;
  const auto* dimensions = object_field(pty.as_object(), "size");
  if (!dimensions) {
    if (pty.as_object().contains("size")) return ApiError::invalid_request("'pty.size' must be an object");
    return size;
  }
  for (auto [key, into] : {std::pair{"cols", &size.cols}, std::pair{"rows", &size.rows}}) {
    const auto* v = dimensions->if_contains(key);
    if (!v || v->is_null()) continue;
    auto value = integer_of(*v);
    if (!value || *value < 0 || *value > UINT16_MAX)
      return ApiError::invalid_request("'pty.size." + std::string(key) +
                                       "' must be a whole number from 0 to " + std::to_string(UINT16_MAX));
    *into = static_cast<uint16_t>(*value);
  }
  return size;
}

// ProcessSelector: {"pid": N} or {"tag": "..."}.
Result<std::shared_ptr<e2b::Process>> select_process(ApiContext& api, const Container& container,
                                                     const json::object& request) {
  const auto* process = object_field(request, "process");
  if (!process) return ApiError::invalid_request("'process' (a pid or a tag) is required");
  std::shared_ptr<e2b::Process> found;
  if (const auto* pid = process->if_contains("pid")) {
    auto value = integer_of(*pid);
    if (!value || *value < 0 || *value > UINT32_MAX)
      return ApiError::invalid_request("'process.pid' must be a pid");
    found = api.processes.find(container, static_cast<uint32_t>(*value));
    if (!found) return ApiError::not_found("process with pid " + std::to_string(*value) + " not found");
  } else if (const auto* tag = process->if_contains("tag"); tag && tag->is_string()) {
    found = api.processes.find_tag(container, std::string(tag->as_string()));
    if (!found)
      return ApiError::not_found("process with tag '" + std::string(tag->as_string()) + "' not found");
  } else {
    return ApiError::invalid_request("'process' must name a pid or a tag");
  }
  return found;
}

asio::awaitable<Result<Response>> start_process(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_stream_request(ctx, kStartMessage);
  if (!request) co_return request.error();
  if (auto user = check_user(ctx); !user) co_return user.error();
  auto config = co_await process_config(*request);
  if (!config) co_return config.error();
  if (const auto* pty = request->if_contains("pty"); pty && !pty->is_null()) {
    auto size = terminal_size(*pty);
    if (!size) co_return size.error();
    config->terminal = *size;
  }
  auto tag = string_field(*request, "tag");
  if (!tag) co_return tag.error();
  bool keep_stdin = true;  // the protocol's default; E2B's SDKs send false unless asked
  if (const auto* stdin_flag = request->if_contains("stdin"); stdin_flag && stdin_flag->is_bool())
    keep_stdin = stdin_flag->as_bool();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  auto started =
      co_await api.processes.start(addressed->container, api.containers, std::move(*config), std::move(*tag),
                                   addressed->sandbox.env_vars, keep_stdin, connect_rpc::timeout_of(ctx));
  if (!started) co_return started.error();
  co_return event_stream(started->reader, started->process->pid(), keepalive_of(ctx), addressed->container);
}

asio::awaitable<Result<Response>> connect_process(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_stream_request(ctx);
  if (!request) co_return request.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  auto process = select_process(api, *addressed->container, *request);
  if (!process) co_return process.error();
  auto reader = co_await (*process)->subscribe();
  co_return event_stream(reader, (*process)->pid(), keepalive_of(ctx), addressed->container);
}

asio::awaitable<Result<Response>> list_processes(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_unary(ctx);
  if (!request) co_return request.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  json::array processes;
  for (const auto& p : api.processes.list(*addressed->container)) {
    if (p->ended()) continue;
    json::object envs;
    for (const auto& [name, value] : p->config().envs) envs[name] = value;
    json::array args;
    for (const auto& arg : p->config().args) args.emplace_back(arg);
    json::object config{{"cmd", p->config().cmd}, {"args", std::move(args)}, {"envs", std::move(envs)}};
    if (p->config().cwd) config["cwd"] = *p->config().cwd;
    json::object info{{"config", std::move(config)}, {"pid", p->pid()}};
    if (p->tag()) info["tag"] = *p->tag();
    processes.push_back(std::move(info));
  }
  co_return connect_rpc::unary_ok({{"processes", std::move(processes)}});
}

asio::awaitable<Result<Response>> send_input(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_unary(ctx, kInputMessage);
  if (!request) co_return request.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  auto process = select_process(api, *addressed->container, *request);
  if (!process) co_return process.error();
  const auto* input = object_field(*request, "input");
  if (!input) co_return ApiError::invalid_request("'input' is required");
  // ProcessInput is a oneof: "stdin" for a process on pipes, "pty" for one on a terminal
  // (both go to what the process reads: its stdin pipe, or its terminal).
  const bool to_terminal = input->contains("pty");
  if (to_terminal && input->contains("stdin"))
    co_return ApiError::invalid_request("'input' holds one of 'stdin' and 'pty', not both");
  if (to_terminal && !(*process)->on_terminal())
    co_return ApiError::invalid_request("Process " + std::to_string((*process)->pid()) +
                                        " does not run on a terminal (PTY): send its input as 'stdin'");
  const char* field = to_terminal ? "pty" : "stdin";
  auto data = string_field(*input, field);
  if (!data) co_return data.error();
  auto bytes = base64_decode(data->value_or(""));
  if (!bytes) co_return ApiError::invalid_request("'input." + std::string(field) + "' must be base64");
  auto written = co_await (*process)->write_stdin(std::move(*bytes));
  if (!written) co_return written.error();
  co_return connect_rpc::unary_ok({});
}

// Update: a process's terminal window size ({"process": selector, "pty": {"size": ...}}),
// which the process sees as SIGWINCH and in TIOCGWINSZ (`stty size`).
asio::awaitable<Result<Response>> update_process(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_unary(ctx);
  if (!request) co_return request.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  auto process = select_process(api, *addressed->container, *request);
  if (!process) co_return process.error();
  if (const auto* pty = request->if_contains("pty"); pty && !pty->is_null()) {
    auto size = terminal_size(*pty);
    if (!size) co_return size.error();
    auto resized = co_await (*process)->resize_terminal(*size);
    if (!resized) co_return resized.error();
  }
  co_return connect_rpc::unary_ok({});
}

asio::awaitable<Result<Response>> close_stdin(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_unary(ctx);
  if (!request) co_return request.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  auto process = select_process(api, *addressed->container, *request);
  if (!process) co_return process.error();
  auto closed = co_await (*process)->close_stdin();
  if (!closed) co_return closed.error();
  co_return connect_rpc::unary_ok({});
}

asio::awaitable<Result<Response>> send_signal(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_unary(ctx);
  if (!request) co_return request.error();
  int signal = 0;
  if (const auto* value = request->if_contains("signal")) {
    if (value->is_string() && value->as_string() == "SIGNAL_SIGKILL")
      signal = SIGKILL;
    else if (value->is_string() && value->as_string() == "SIGNAL_SIGTERM")
      signal = SIGTERM;
    else if (auto number = integer_of(*value); number && (*number == SIGKILL || *number == SIGTERM))
      signal = static_cast<int>(*number);
  }
  if (!signal) co_return ApiError::invalid_request("'signal' must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  auto process = select_process(api, *addressed->container, *request);
  if (!process) co_return process.error();
  (*process)->kill(signal);
  co_return connect_rpc::unary_ok({});
}

// ---------------------------------------------------------------------------------
// The filesystem service.

// What a change made through the API means for the rest of sandboxd: the outputs'
// index is looked at again, and the sessions bucket copies the change.
void note_changed(ApiContext& api, Container& container) { ContainerFiles(api).note_change(container); }

template <typename Op>
asio::awaitable<Result<Response>> filesystem_call(ApiContext& api, RequestContext& ctx, Op op) {
  auto request = co_await connect_rpc::read_unary(ctx);
  if (!request) co_return request.error();
  if (auto user = check_user(ctx); !user) co_return user.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  ContainerFiles container_files(api);
  auto ready = co_await container_files.ready(addressed->container);
  if (!ready) co_return ready.error();
  const uid_t uid = api.config()->sandbox_host_uid;
  auto work = [request = std::move(*request), paths = (*ready)->paths, uid, &op]() -> Result<json::object> {
    return op(request, paths, uid);
  };
  auto answer = co_await run_blocking(std::move(work));
  if (!answer) co_return answer.error();
  co_return connect_rpc::unary_ok(*answer);
}

Result<std::string> path_of(const json::object& request, std::string_view key = "path") {
  auto path = string_field(request, key);
  if (!path) return path.error();
  if (!*path || (*path)->empty()) return ApiError::invalid_request("'" + std::string(key) + "' is required");
  return to_sandbox_path(**path);
}

asio::awaitable<Result<Response>> stat(ApiContext& api, RequestContext& ctx) {
  co_return co_await filesystem_call(
      api, ctx, [](const json::object& request, const ContainerPaths& paths, uid_t) -> Result<json::object> {
        auto path = path_of(request);
        if (!path) return path.error();
        auto entry = service::stat_entry(paths, *path);
        if (!entry) return entry.error();
        return json::object{{"entry", entry_info(*entry)}};
      });
}

asio::awaitable<Result<Response>> list_dir(ApiContext& api, RequestContext& ctx) {
  co_return co_await filesystem_call(
      api, ctx, [](const json::object& request, const ContainerPaths& paths, uid_t) -> Result<json::object> {
        auto path = path_of(request);
        if (!path) return path.error();
        int64_t depth = 1;
        if (const auto* value = request.if_contains("depth")) {
          auto number = integer_of(*value);
          if (!number || *number < 0 || *number > 64)
            return ApiError::invalid_request("'depth' must be from 1 to 64");
          depth = std::max<int64_t>(1, *number);
        }
        auto entries = service::list_entries(paths, *path, static_cast<int>(depth));
        if (!entries) return entries.error();
        json::array out;
        for (const auto& entry : *entries) out.push_back(entry_info(entry));
        return json::object{{"entries", std::move(out)}};
      });
}

asio::awaitable<Result<Response>> make_dir(ApiContext& api, RequestContext& ctx) {
  co_return co_await filesystem_call(
      api, ctx,
      [](const json::object& request, const ContainerPaths& paths, uid_t uid) -> Result<json::object> {
        auto path = path_of(request);
        if (!path) return path.error();
        auto entry = service::make_directory(paths, *path, uid, uid);
        if (!entry) return entry.error();
        return json::object{{"entry", entry_info(*entry)}};
      });
}

asio::awaitable<Result<Response>> move(ApiContext& api, RequestContext& ctx) {
  auto result = co_await filesystem_call(
      api, ctx,
      [](const json::object& request, const ContainerPaths& paths, uid_t uid) -> Result<json::object> {
        auto from = path_of(request, "source");
        if (!from) return from.error();
        auto to = path_of(request, "destination");
        if (!to) return to.error();
        auto entry = service::move_entry(paths, *from, *to, uid, uid);
        if (!entry) return entry.error();
        return json::object{{"entry", entry_info(*entry)}};
      });
  co_return result;
}

asio::awaitable<Result<Response>> remove(ApiContext& api, RequestContext& ctx) {
  co_return co_await filesystem_call(
      api, ctx, [](const json::object& request, const ContainerPaths& paths, uid_t) -> Result<json::object> {
        auto path = path_of(request);
        if (!path) return path.error();
        if (auto removed = service::remove_entry(paths, *path); !removed) return removed.error();
        return json::object{};
      });
}

const char* event_type_name(service::WatchEvent::Type type) {
  switch (type) {
    case service::WatchEvent::Type::kCreate:
      return "EVENT_TYPE_CREATE";
    case service::WatchEvent::Type::kWrite:
      return "EVENT_TYPE_WRITE";
    case service::WatchEvent::Type::kRemove:
      return "EVENT_TYPE_REMOVE";
    case service::WatchEvent::Type::kRename:
      return "EVENT_TYPE_RENAME";
    case service::WatchEvent::Type::kChmod:
      return "EVENT_TYPE_CHMOD";
  }
  return "EVENT_TYPE_UNSPECIFIED";
}

// The events of a watch to its reader: the start, each change as it happens (by name
// relative to the folder, as envd reports them), keep-alives while nothing changes,
// until the deadline or the folder's end.
// (Built outside the coroutine: GCC 12 miscompiles an initializer list's temporaries
// inside a co_await expression.)
std::string watch_start_message() { return message(json::object{{"start", json::object{}}}); }
std::string watch_keepalive_message() { return message(json::object{{"keepalive", json::object{}}}); }
std::string watch_change_message(const service::WatchEvent& event, const std::optional<FileEntry>& entry) {
  json::object change{{"name", to_valid_utf8(event.name)}, {"type", event_type_name(event.type)}};
  if (entry) change["entry"] = entry_info(*entry);
  json::object response;
  response["filesystem"] = std::move(change);
  return message(response);
}

// What a watch with include_entry sends with each event: the entry as Stat describes
// it now, when it is there (not for a remove, nor for a name gone again since).
struct EntryLookup {
  ContainerPaths paths;
  std::string folder;  // the watched folder's sandbox path
};

asio::awaitable<void> watch_events(server::ChunkWriter& out, std::shared_ptr<service::DirectoryWatch> watch,
                                   std::chrono::milliseconds keepalive,
                                   std::chrono::steady_clock::time_point deadline,
                                   std::optional<EntryLookup> entries) {
  const std::string start = watch_start_message();
  if (!co_await out.write(start)) co_return;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      co_await out.write(connect_rpc::end_of_stream(nullptr));
      co_return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    auto events = co_await watch->next(std::min(keepalive, left + std::chrono::milliseconds(1)));
    if (!events) {
      const ApiError error = events.error();
      co_await out.write(connect_rpc::end_of_stream(&error));
      co_return;
    }
    std::vector<std::optional<FileEntry>> described(events->size());
    if (entries && !events->empty()) {
      auto describe = [&entries, &events, &described] {
        for (size_t i = 0; i < events->size(); ++i) {
          if ((*events)[i].type == service::WatchEvent::Type::kRemove) continue;
          auto entry = service::stat_entry(entries->paths, entries->folder + "/" + (*events)[i].name);
          if (entry) described[i] = std::move(*entry);
        }
      };
      co_await run_blocking(std::move(describe));
    }
    std::string batch;
    if (events->empty()) batch = watch_keepalive_message();
    for (size_t i = 0; i < events->size(); ++i) batch += watch_change_message((*events)[i], described[i]);
    if (!co_await out.write(batch)) co_return;
  }
}

// WatchDir. It ends at the client's Connect-Timeout-Ms, when the folder goes away, or
// when the client does.
asio::awaitable<Result<Response>> watch_dir(ApiContext& api, RequestContext& ctx) {
  auto request = co_await connect_rpc::read_stream_request(ctx);
  if (!request) co_return request.error();
  if (auto user = check_user(ctx); !user) co_return user.error();
  auto path = path_of(*request);
  if (!path) co_return path.error();
  bool recursive = false;
  if (const auto* flag = request->if_contains("recursive"); flag && flag->is_bool())
    recursive = flag->as_bool();
  bool include_entry = false;
  if (const auto* flag = request->if_contains("includeEntry"); flag && flag->is_bool())
    include_entry = flag->as_bool();
  // allowNetworkMounts lets envd watch a folder on NFS, CIFS or FUSE, which it refuses
  // by default (their events may never come): the folders a watch reaches here are the
  // container's own, never a network mount, so there is nothing to allow or refuse.
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  ContainerFiles container_files(api);
  auto ready = co_await container_files.ready(addressed->container);
  if (!ready) co_return ready.error();
  auto open = [watches = &api.directory_watches, owner = ctx.owner, paths = (*ready)->paths, path = *path,
               recursive] { return watches->open(owner, paths, path, recursive); };
  auto watch = co_await run_blocking(std::move(open));
  if (!watch) co_return watch.error();
  const auto timeout = connect_rpc::timeout_of(ctx);
  const auto deadline = timeout.count() > 0 ? std::chrono::steady_clock::now() + timeout
                                            : std::chrono::steady_clock::time_point::max();
  std::optional<EntryLookup> entries;
  if (include_entry) entries = EntryLookup{(*ready)->paths, *path};
  server::StreamResponse res{connect_rpc::stream_header(), nullptr};
  res.produce = [watch = std::move(*watch), keepalive = keepalive_of(ctx), deadline,
                 entries = std::move(entries)](server::ChunkWriter& out) -> asio::awaitable<void> {
    // A client that leaves ends the watch at once (not at the next keep-alive), so its
    // share of watches comes back.
    auto gone = server::DisconnectWatch::start(out.stream().socket(), [watch] { watch->cancel(); });
    co_await watch_events(out, watch, keepalive, deadline, entries);
    gone->stop();
  };
  co_return res;
}

// Marks the container changed after a call that changes files.
template <typename Handler>
auto changing(Handler handler) {
  return [handler](ApiContext& api, RequestContext& ctx) -> asio::awaitable<Result<Response>> {
    auto result = co_await handler(api, ctx);
    if (result)
      if (auto container = api.containers.lifecycle().find_open(
              ctx.owner, std::string(ctx.header_value(kSandboxIdHeader))))
        note_changed(api, *container);
    co_return result;
  };
}

// ---------------------------------------------------------------------------------
// /files: bodies over plain HTTP.

ApiError file_problem(store::FileError error, const std::string& path) {
  const std::string shown = to_e2b_path(path);
  switch (error) {
    case store::FileError::kNotFound:
      return ApiError::not_found("File not found: " + shown);
    case store::FileError::kNotAFile:
      return ApiError::invalid_request("'" + shown + "' is a directory or not a regular file");
    case store::FileError::kOutsideMounts:
      return ApiError::invalid_request("'" + shown +
                                       "' is outside the sandbox's persistent folders (/home/user, "
                                       "/mnt/user-data/outputs, /mnt/user-data/uploads)");
    case store::FileError::kNoSpace:
    case store::FileError::kTooLarge:
      return ApiError::insufficient_storage("Not enough disk space in the sandbox");
    default:
      return ApiError::internal();
  }
}

Result<void> check_username_query(const RequestContext& ctx) {
  if (auto name = ctx.query_value("username")) return check_user_name(*name);
  return check_user(ctx);
}

asio::awaitable<Result<Response>> download(ApiContext& api, RequestContext& ctx) {
  if (auto user = check_username_query(ctx); !user) co_return user.error();
  auto query_path = ctx.query_value("path");
  if (!query_path || query_path->empty()) co_return ApiError::invalid_request("'path' is required");
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  ContainerFiles container_files(api);
  auto ready = co_await container_files.ready(addressed->container);
  if (!ready) co_return ready.error();
  const std::string path = to_sandbox_path(*query_path);
  auto opened = api.files.open_for_read((*ready)->paths, path);
  if (!opened) co_return file_problem(opened.error(), path);
  server::FileResponse response;
  response.header.version(11);
  response.header.result(HttpStatus::ok);
  response.header.set(http::field::content_type, "application/octet-stream");
  response.header.set("X-Content-Type-Options", "nosniff");
  response.fd = opened->fd;
  response.length = opened->size;
  co_return response;
}

// The files an upload holds open: each is a temporary file and its folder (two
// descriptors) from its part's first byte until it is committed, at the part's end. One
// upload holds one at a time, and one owner's uploads together at most
// kOpenFilesPerOwner (then a new part waits until one of them commits, at most
// kUploadSlotWait): an upload of thousands of small parts, or many uploads at once,
// cannot take the server's descriptors from others.
constexpr size_t kOpenFilesPerOwner = 64;
constexpr auto kUploadSlotWait = std::chrono::seconds(60);

class UploadSlots {
 public:
  // One open file of an owner's uploads, given back when it goes.
  class Slot {
   public:
    Slot() = default;
    Slot(UploadSlots* slots, std::string owner) : slots_(slots), owner_(std::move(owner)) {}
    Slot(Slot&& other) noexcept
        : slots_(std::exchange(other.slots_, nullptr)), owner_(std::move(other.owner_)) {}
    Slot& operator=(Slot&& other) noexcept {
      if (this != &other) {
        release();
        slots_ = std::exchange(other.slots_, nullptr);
        owner_ = std::move(other.owner_);
      }
      return *this;
    }
    ~Slot() { release(); }
    explicit operator bool() const { return slots_ != nullptr; }

   private:
    void release() {
      if (slots_) std::exchange(slots_, nullptr)->give_back(owner_);
    }
    UploadSlots* slots_ = nullptr;
    std::string owner_;
  };

  // A slot now, if the owner has one left.
  std::optional<Slot> try_take(const std::string& owner) {
    std::lock_guard lock(mutex_);
    size_t& held = held_[owner];
    if (held >= kOpenFilesPerOwner) return std::nullopt;
    ++held;
    return Slot(this, owner);
  }
  // A slot once the owner has one, waiting at most kUploadSlotWait (then a 429).
  asio::awaitable<Result<Slot>> take(const std::string& owner) {
    const auto deadline = std::chrono::steady_clock::now() + kUploadSlotWait;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
      if (auto slot = try_take(owner)) co_return std::move(*slot);
      if (std::chrono::steady_clock::now() >= deadline)
        co_return ApiError::rate_limited("This key's uploads hold " + std::to_string(kOpenFilesPerOwner) +
                                             " files open already; send fewer uploads at once",
                                         1);
      // (Slots come back from other connections' threads: a short poll, while an owner
      // has more files under way than its share, instead of a wake-up across threads.)
      timer.expires_after(std::chrono::milliseconds(10));
      boost::system::error_code ignored;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
  }

 private:
  void give_back(const std::string& owner) {
    std::lock_guard lock(mutex_);
    auto it = held_.find(owner);
    if (it != held_.end() && --it->second == 0) held_.erase(it);
  }
  std::mutex mutex_;
  std::map<std::string, size_t> held_;
};

// One file of an upload, stored through the file service (service/container_files.h):
// charged against the owner's stored bytes as its bytes arrive (a 403 past the quota,
// the file dropped), with its record and its copy in the sessions bucket under outputs/
// as any other upload there; a file in the workspace counts while it arrives and is
// bounded afterwards by the workspace's own size, as what code writes there (the stored
// bytes are uploads' and outputs'), and goes to the bucket with the workspace's flush.
struct UploadFile {
  std::unique_ptr<service::FileUpload> upload;
  UploadSlots::Slot slot;
};

// Where an upload may write: envd writes anywhere the user may, and here the
// container's persistent folders but the read-only ones (a 403, as envd's EACCES).
Result<void> writable(const Container& container, const std::string& path) {
  auto resolved = resolve_sandbox_path(container.paths, path);
  if (resolved && resolved->read_only)
    return ApiError::permission("'" + resolved->sandbox_path + "' is read-only in the sandbox");
  return {};
}

// How E2B's files are stored: the workspace too, every upload setting the file's
// metadata whole (none when it sends none: a new inode takes the name, without the
// previous version's attributes), a store error in envd's words.
ContainerFiles::StoreOptions store_options(const FileMetadata& metadata, std::optional<uint64_t> declared) {
  return {
      .declared_size = declared,
      .workspace_too = true,
      .attributes = metadata.attributes(),
      .wording = [](store::FileError error, const std::string& path) { return file_problem(error, path); }};
}

// Finishes the files (their bodies in place, their records written) and closes them;
// what each became goes to `out`, as /files answers it. The first failure drops the rest.
asio::awaitable<Result<void>> commit_all(std::vector<UploadFile>& files, const FileMetadata& metadata,
                                         json::array& out) {
  json::object metadata_json;
  for (const auto& [key, value] : metadata.entries) metadata_json[key] = value;
  Result<void> outcome;
  for (auto& file : files) {
    if (!outcome) {
      co_await file.upload->abort();
      continue;
    }
    auto record = co_await file.upload->finish();
    if (!record) {
      outcome = record.error();
      continue;
    }
    const std::string shown = to_e2b_path(record->path);
    json::object entry{{"name", shown.substr(shown.rfind('/') + 1)}, {"type", "file"}, {"path", shown}};
    if (!metadata_json.empty()) entry["metadata"] = metadata_json;
    out.push_back(std::move(entry));
  }
  files.clear();  // (closed here, on the I/O thread: their slots and charges go back)
  co_return outcome;
}

asio::awaitable<void> abort_all(std::vector<UploadFile>& files) {
  for (auto& file : files) co_await file.upload->abort();
  files.clear();
}

asio::awaitable<Result<Response>> upload(ApiContext& api, UploadSlots& slots, RequestContext& ctx) {
  if (auto user = check_username_query(ctx); !user) co_return user.error();
  auto gzipped = gzip_encoded(ctx);
  if (!gzipped) co_return gzipped.error();
  auto metadata = metadata_of_headers(ctx);
  if (!metadata) co_return metadata.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!addressed) co_return addressed.error();
  ContainerFiles files(api);
  auto ready = co_await files.ready(addressed->container);
  if (!ready) co_return ready.error();
  Container& container = **ready;
  const auto query_path = ctx.query_value("path");
  const uint64_t limit = api.config()->max_upload_bytes;
  const auto stored = co_await files.stored_bytes(container);
  json::array committed;
  std::vector<UploadFile> ended;  // ended parts, open until committed
  const auto content_type = ctx.header_value(http::field::content_type);
  auto boundary = store::MultipartParser::boundary_from_content_type(content_type);
  if (!boundary) {
    // A raw body: one file at ?path=.
    if (!query_path || query_path->empty())
      co_return ApiError::invalid_request("'path' is required for a raw upload");
    const std::string path = to_sandbox_path(*query_path);
    if (auto allowed = writable(container, path); !allowed) co_return allowed.error();
    auto slot = co_await slots.take(ctx.owner);
    if (!slot) co_return slot.error();
    // (A compressed body's size says nothing of what it inflates to.)
    auto options = store_options(*metadata, *gzipped ? std::nullopt : ctx.declared_body_size());
    auto upload = co_await files.begin_store(container, path, std::move(options), stored);
    if (!upload) co_return upload.error();
    service::FileUpload& file = **upload;
    Result<void> received;
    if (*gzipped) {
      // Inflated a piece at a time into the file; what it inflates to counts against
      // the limit (the compressed body is bounded by it too).
      GzipBody body(limit);
      auto to_file = [&file](std::string_view data) { return file.append(data); };
      // (Named, not a temporary in the co_await: GCC 12 mishandles those.)
      const server::RequestContext::AsyncChunkConsumer inflate_to_file = body.inflating(to_file);
      received = co_await ctx.read_body_stream_async(limit, inflate_to_file);
      if (received) received = body.check_complete();
    } else {
      received = co_await receive_body(ctx, file, limit);
    }
    if (!received) {
      co_await file.abort();
      co_return received.error();
    }
    ended.push_back({std::move(*upload), std::move(*slot)});
  } else {
    // Each 'file' part: its path when its headers end (the parser pauses there, and the
    // part waits for a slot and its charge), its file opened at its first byte (or at
    // its end, when it is empty) and committed at its end (the parser pauses again).
    std::optional<ApiError> failure;
    size_t file_parts = 0;
    std::optional<std::string> part_path;              // the 'file' part being read
    std::optional<UploadFile> current;                 // its file, once opened
    UploadSlots::Slot part_slot;                       // the slot it opens with
    std::unique_ptr<service::FileUpload> part_upload;  // and its upload
    bool wants_slot = false;
    store::MultipartParser* parser_ptr = nullptr;
    auto open_current = [&]() -> bool {
      if (!part_upload) {  // (begun before the part's first byte is fed: a refusal ends the feed)
        failure = ApiError::internal();
        return false;
      }
      current.emplace(UploadFile{std::move(part_upload), std::move(part_slot)});
      return true;
    };
    store::MultipartParser parser(
        *boundary,
        [&](const store::PartHeaders& part) {
          part_path.reset();
          if (part.name != "file") return true;  // other fields are ignored
          if (file_parts >= kMaxFilesPerUpload) {
            failure = ApiError::invalid_request("At most " + std::to_string(kMaxFilesPerUpload) +
                                                " files in one upload");
            return false;
          }
          // ?path= names the file of a one-file upload; otherwise each part's filename
          // is its path (what E2B's SDKs send).
          const std::string chosen =
              query_path && !query_path->empty() ? *query_path : part.filename.value_or("");
          if (chosen.empty()) {
            failure = ApiError::invalid_request("A 'file' part has no filename; pass ?path=");
            return false;
          }
          ++file_parts;
          part_path = to_sandbox_path(chosen);
          if (auto allowed = writable(container, *part_path); !allowed) {
            failure = allowed.error();
            return false;
          }
          wants_slot = true;
          parser_ptr->pause();
          return true;
        },
        [&](std::string_view data) {
          if (!part_path) return true;
          if (!current && !open_current()) return false;
          if (auto written = current->upload->write(data); !written) {
            failure = written.error();
            return false;
          }
          return true;
        },
        [&]() {
          if (!part_path) return true;
          if (!current && !open_current()) return false;  // an empty file
          ended.push_back(std::move(*current));
          current.reset();
          part_path.reset();
          parser_ptr->pause();
          return true;
        });
    parser_ptr = &parser;
    // A refused part ends the upload, but the rest of the body is still read (and
    // dropped, within the upload limit): a client that streams its body reads the
    // answer instead of finding the connection closed under its writes.
    std::optional<ApiError> refused;
    server::RequestContext::AsyncChunkConsumer on_chunk =
        [&](std::string_view chunk) -> asio::awaitable<Result<void>> {
      while (!chunk.empty() && !refused) {
        if (!ended.empty()) {
          if (auto done = co_await commit_all(ended, *metadata, committed); !done) {
            refused = done.error();
            break;
          }
        }
        if (wants_slot) {
          wants_slot = false;
          auto taken = co_await slots.take(ctx.owner);
          if (!taken) {
            refused = taken.error();
            break;
          }
          part_slot = std::move(*taken);
          auto options = store_options(*metadata, std::nullopt);
          auto begun = co_await files.begin_store(container, *part_path, std::move(options), stored);
          if (!begun) {
            refused = begun.error();
            break;
          }
          part_upload = std::move(*begun);
        }
        service::FileUpload* writing = current ? current->upload.get() : part_upload.get();
        if (writing) co_await writing->room(chunk.size());
        if (!parser.feed_until_pause(chunk)) {
          refused =
              failure ? *failure : ApiError::invalid_request("Malformed multipart body: " + parser.error());
          break;
        }
        // The bucket's full parts sent (a file under outputs/ streams there).
        if (writing)
          if (auto drained = co_await writing->drain(); !drained) refused = drained.error();
      }
      co_return Result<void>{};
    };
    std::optional<GzipBody> gzip_body;
    if (*gzipped) gzip_body.emplace(limit);
    // (Named, not a temporary in the co_await: GCC 12 mishandles those.)
    server::RequestContext::AsyncChunkConsumer consumer = on_chunk;
    if (gzip_body) consumer = gzip_body->inflating(on_chunk);
    auto received = co_await ctx.read_body_stream_async(limit, consumer);
    if (received && refused) received = *refused;
    if (received && gzip_body) received = gzip_body->check_complete();
    if (received && !parser.finished())
      received = ApiError::invalid_request("The multipart body ended before its closing boundary");
    if (received && file_parts == 0)
      received = ApiError::invalid_request("The multipart body has no 'file' field");
    if (!received) {
      if (current) co_await current->upload->abort();
      if (part_upload) co_await part_upload->abort();
      co_await abort_all(ended);
      if (!committed.empty()) files.note_change(container);
      co_return received.error();
    }
  }
  auto done = co_await commit_all(ended, *metadata, committed);
  files.note_change(container);
  if (!done) co_return done.error();
  co_return json_ok(committed);
}

// GET /health: 204 while the sandbox runs (or can run: it starts on the next call), 502
// once it is gone or paused, as E2B's proxy answers.
asio::awaitable<Result<Response>> health(ApiContext& api, RequestContext& ctx) {
  auto sandbox = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!sandbox) co_return sandbox.error();
  co_return server::StringResponse{HttpStatus::no_content, 11};
}

}  // namespace

namespace {

// envd's signed file URLs (the SDKs' downloadUrl and uploadUrl): a GET or POST of /files
// from the public listener that presents no token but a signature, for `operation`
// ("read" or "write"). Sets ctx.owner to the owner of the token (of `tokens`, the
// server's (token, owner) pairs) that signed it, or answers E2B's 401 ("invalid
// signature", "signature is already expired"); nullopt for a request that is not signed
// (the server's token check then decides).
//
// The signature, as the SDKs compute it (getSignature): "v1_" and the unpadded base64
// of SHA-256 over "path:operation:user:token", with ":expiration" (Unix seconds) when
// the URL expires; operation "read" for a download, "write" for an upload; path and
// user as the URL gives them (either may be empty). The token is the envdAccessToken
// the sandbox was made with: here the owner's own, so each of the server's tokens is
// tried (a handful; constant-time compares) and the one that signed names the owner.
// A signature is checked before its expiry, as envd does: a forged URL is "invalid"
// whatever its expiry says.
server::RouteCredential signed_url(
    std::string operation, std::shared_ptr<const std::vector<std::pair<std::string, std::string>>> tokens) {
  return [operation = std::move(operation),
          tokens = std::move(tokens)](RequestContext& ctx) -> std::optional<Result<void>> {
    if (ctx.origin || !server::presented_token(ctx).empty() || !ctx.query_value("signature"))
      return std::nullopt;
    const std::string signature = ctx.query_value("signature").value_or("");
    const auto expiration = ctx.query_value("signature_expiration");
    const std::string prefix = ctx.query_value("path").value_or("") + ":" + operation + ":" +
                               ctx.query_value("username").value_or("") + ":";
    const std::string suffix = expiration ? ":" + *expiration : "";
    const std::string* owner = nullptr;
    for (const auto& [token, token_owner] : *tokens) {
      const std::string raw = prefix + token + suffix;
      unsigned char digest[EVP_MAX_MD_SIZE];
      unsigned int length = 0;
      EVP_Digest(raw.data(), raw.size(), digest, &length, EVP_sha256(), nullptr);
      std::string expected =
          "v1_" + base64_encode(std::string_view(reinterpret_cast<const char*>(digest), length));
      while (expected.ends_with('=')) expected.pop_back();
      if (expected.size() == signature.size() &&
          CRYPTO_memcmp(expected.data(), signature.data(), expected.size()) == 0)
        owner = &token_owner;
    }
    if (!owner) return Result<void>(ApiError::authentication("invalid signature"));
    if (expiration) {
      int64_t at = 0;
      auto [end, ec] = std::from_chars(expiration->data(), expiration->data() + expiration->size(), at);
      if (ec != std::errc() || end != expiration->data() + expiration->size())
        return Result<void>(ApiError::authentication("invalid signature expiration"));
      if (at < static_cast<int64_t>(std::time(nullptr)))
        return Result<void>(ApiError::authentication("signature is already expired"));
    }
    ctx.owner = *owner;
    return Result<void>();
  };
}

}  // namespace

void install_envd_routes(server::HttpServer& http, ApiContext& api,
                         std::vector<std::pair<std::string, std::string>> tokens) {
  const server::RouteOptions sandbox = in_addressed_sandbox();
  // Connect's RPCs answer every error in Connect's shape.
  const server::RouteOptions unary = in_addressed_sandbox(connect_rpc::unary_shape);
  const server::RouteOptions stream = in_addressed_sandbox(connect_rpc::stream_shape);
  // /files also takes a URL signed with a token in place of the token.
  const auto signers =
      std::make_shared<const std::vector<std::pair<std::string, std::string>>>(std::move(tokens));
  server::RouteOptions read_files = sandbox, write_files = sandbox;
  read_files.credential = signed_url("read", signers);
  write_files.credential = signed_url("write", signers);
  const std::string base = "/e2b/sandbox";
  using connect_rpc::stream_route;
  using connect_rpc::unary_route;
  http.route(http::verb::get, base + "/health", "e2b.envd.health", e2b_route(api, health), sandbox);
  http.route(http::verb::get, base + "/files", "e2b.envd.files.read", e2b_route(api, download), read_files);
  auto slots = std::make_shared<UploadSlots>();
  http.route(http::verb::post, base + "/files", "e2b.envd.files.write",
             e2b_route(api, [slots](ApiContext& context,
                                    RequestContext& ctx) { return upload(context, *slots, ctx); }),
             write_files);
  const std::string process = base + "/process.Process/";
  http.route(http::verb::post, process + "Start", "e2b.envd.process.start", stream_route(api, start_process),
             stream);
  http.route(http::verb::post, process + "Connect", "e2b.envd.process.connect",
             stream_route(api, connect_process), stream);
  http.route(http::verb::post, process + "List", "e2b.envd.process.list", unary_route(api, list_processes),
             unary);
  http.route(http::verb::post, process + "SendInput", "e2b.envd.process.input", unary_route(api, send_input),
             unary);
  http.route(http::verb::post, process + "Update", "e2b.envd.process.update",
             unary_route(api, update_process), unary);
  http.route(http::verb::post, process + "CloseStdin", "e2b.envd.process.input",
             unary_route(api, close_stdin), unary);
  http.route(http::verb::post, process + "SendSignal", "e2b.envd.process.signal",
             unary_route(api, send_signal), unary);
  const std::string filesystem = base + "/filesystem.Filesystem/";
  http.route(http::verb::post, filesystem + "Stat", "e2b.envd.fs.stat", unary_route(api, stat), unary);
  http.route(http::verb::post, filesystem + "ListDir", "e2b.envd.fs.list", unary_route(api, list_dir), unary);
  http.route(http::verb::post, filesystem + "MakeDir", "e2b.envd.fs.mkdir",
             unary_route(api, changing(make_dir)), unary);
  http.route(http::verb::post, filesystem + "Move", "e2b.envd.fs.move", unary_route(api, changing(move)),
             unary);
  http.route(http::verb::post, filesystem + "Remove", "e2b.envd.fs.remove",
             unary_route(api, changing(remove)), unary);
  http.route(http::verb::post, filesystem + "WatchDir", "e2b.envd.fs.watch", stream_route(api, watch_dir),
             stream);
}

}  // namespace sandboxd::e2b
