#include "ops/logging.h"

#include <unistd.h>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "base/utf8.h"

namespace sandboxd::ops {
namespace {

// (Bytes that are not UTF-8, from a request target or a file name, become U+FFFD: a
// JSON log line always parses.)
void append_escaped(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  // Most values (ids, routes, outcomes) are printable ASCII with nothing to escape:
  // appended whole, without the UTF-8 repair's copy or a push per byte.
  if (std::all_of(text.begin(), text.end(), [](char c) {
        const auto byte = static_cast<unsigned char>(c);
        return byte >= 0x20 && byte < 0x80 && c != '"' && c != '\\';
      })) {
    out.append(text);
    return;
  }
  for (unsigned char c : to_valid_utf8(text)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
}

std::string utc_now() {
  auto now = std::chrono::system_clock::now();
  auto seconds = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  // Digits placed by hand: every event line has a time, and snprintf costs more than
  // the rest of a short line.
  char out[] = "0000-00-00T00:00:00.000Z";
  auto put = [&out](size_t at, long long value, int digits) {
    for (int i = digits - 1; i >= 0; --i, value /= 10)
      out[at + static_cast<size_t>(i)] = static_cast<char>('0' + value % 10);
  };
  put(0, tm.tm_year + 1900, 4);
  put(5, tm.tm_mon + 1, 2);
  put(8, tm.tm_mday, 2);
  put(11, tm.tm_hour, 2);
  put(14, tm.tm_min, 2);
  put(17, tm.tm_sec, 2);
  put(20, ms, 3);
  return std::string(out, sizeof out - 1);
}

void append_value(std::string& out, const LogField& field, bool json) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string_view>) {
          if (json) {
            out.push_back('"');
            append_escaped(out, v);
            out.push_back('"');
          } else {
            const bool plain = !v.empty() && v.find_first_of(" \"=\n") == std::string_view::npos;
            if (plain) {
              out.append(v);
            } else {
              out.push_back('"');
              append_escaped(out, v);
              out.push_back('"');
            }
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.3f", v);
          out += buf;
        } else {
          out += std::to_string(v);
        }
      },
      field.value);
}

bool json_logs = false;

// %j: the message as a JSON line. Events are JSON already; anything else is wrapped.
class JsonLineFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string_view text(msg.payload.data(), msg.payload.size());
    std::string line;
    if (!text.empty() && text.front() == '{') {
      // {"time":…,"event":… → add the level after the time.
      line.assign(text);
      auto level = spdlog::level::to_string_view(msg.level);
      auto comma = line.find(',');
      line.insert(comma == std::string::npos ? line.size() - 1 : comma,
                  ",\"level\":\"" + std::string(level.data(), level.size()) + "\"");
    } else {
      auto level = spdlog::level::to_string_view(msg.level);
      line = "{\"time\":\"" + utc_now() + "\",\"level\":\"" + std::string(level.data(), level.size()) +
             "\",\"msg\":\"";
      append_escaped(line, text);
      line += "\"}";
    }
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonLineFlag>(); }
};

// Set around a line of the request path (log_event_batched): the sink leaves it in the
// buffer, for the next flush.
thread_local bool batching_line = false;

// The log on stdout when it is not a terminal (a file, journald's socket): each line is
// written at once, as spdlog's own sink does, except the lines every request and every
// execution make, which wait for the next flush (spdlog::flush_every, a warning, or the
// next line written at once) instead of costing a write of their own each.
class StdoutLineSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::fwrite(formatted.data(), 1, formatted.size(), stdout);
    if (!batching_line) std::fflush(stdout);
  }
  void flush_() override { std::fflush(stdout); }
};

std::unique_ptr<AuditLog>& audit_slot() {
  static std::unique_ptr<AuditLog> log;
  return log;
}

}  // namespace

void configure_logging(bool json) {
  json_logs = json;
  if (!isatty(STDOUT_FILENO)) {
    auto previous = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>(previous->name(), std::make_shared<StdoutLineSink>());
    logger->set_level(previous->level());
    logger->flush_on(previous->flush_level());
    spdlog::set_default_logger(std::move(logger));
  }
  if (!json) return;
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonLineFlag>('j').set_pattern("%j");
  spdlog::set_formatter(std::move(formatter));
}

std::string event_json(std::string_view event, std::initializer_list<LogField> fields) {
  std::string line = "{\"time\":\"" + utc_now() + "\",\"event\":\"";
  append_escaped(line, event);
  line.push_back('"');
  for (const auto& field : fields) {
    line += ",\"";
    append_escaped(line, field.key);
    line += "\":";
    append_value(line, field, true);
  }
  line.push_back('}');
  return line;
}

void log_event(spdlog::level::level_enum level, std::string_view event,
               std::initializer_list<LogField> fields) {
  if (!spdlog::should_log(level)) return;
  if (json_logs) {
    // (A string_view is logged as is: no format string to parse, no copy through fmt.)
    spdlog::default_logger_raw()->log(level, spdlog::string_view_t(event_json(event, fields)));
    return;
  }
  std::string line(event);
  for (const auto& field : fields) {
    line.push_back(' ');
    line.append(field.key).push_back('=');
    append_value(line, field, false);
  }
  spdlog::default_logger_raw()->log(level, spdlog::string_view_t(line));
}

void log_event_batched(spdlog::level::level_enum level, std::string_view event,
                       std::initializer_list<LogField> fields) {
  batching_line = true;
  log_event(level, event, fields);
  batching_line = false;
}

AuditLog::AuditLog(const std::string& path, size_t max_bytes, size_t files) {
  static std::atomic<int> opened{0};
  auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(path, max_bytes, files);
  // A name of its own: registered so that spdlog::flush_every flushes it too, and a log
  // opened after it (another server in the process) never replaces it by name.
  logger_ = std::make_shared<spdlog::logger>("audit-" + std::to_string(++opened), std::move(sink));
  logger_->set_pattern("%v");
  logger_->flush_on(spdlog::level::off);  // record() flushes; record_batched() waits
  spdlog::register_logger(logger_);
}

AuditLog::~AuditLog() {
  logger_->flush();
  spdlog::drop(logger_->name());
}

void AuditLog::record(std::string_view event, std::initializer_list<LogField> fields) {
  logger_->log(spdlog::level::info, spdlog::string_view_t(event_json(event, fields)));
  logger_->flush();  // an audit line is on disk when its request ends
}

void AuditLog::record_batched(std::string_view event, std::initializer_list<LogField> fields) {
  logger_->log(spdlog::level::info, spdlog::string_view_t(event_json(event, fields)));
}

void AuditLog::flush() { logger_->flush(); }

AuditLog* audit() { return audit_slot().get(); }
void set_audit(std::unique_ptr<AuditLog> log) { audit_slot() = std::move(log); }

}  // namespace sandboxd::ops
