#include "ops/logging.h"

#include <algorithm>
#include <chrono>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/rotating_file_sink.h>

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
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
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
    for (int i = digits - 1; i >= 0; --i, value /= 10) out[at + static_cast<size_t>(i)] = static_cast<char>('0' + value % 10);
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
      line = "{\"time\":\"" + utc_now() + "\",\"level\":\"" + std::string(level.data(), level.size()) + "\",\"msg\":\"";
      append_escaped(line, text);
      line += "\"}";
    }
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonLineFlag>(); }
};

std::unique_ptr<AuditLog>& audit_slot() {
  static std::unique_ptr<AuditLog> log;
  return log;
}

}  // namespace

void configure_logging(bool json) {
  json_logs = json;
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

void log_event(spdlog::level::level_enum level, std::string_view event, std::initializer_list<LogField> fields) {
  if (!spdlog::should_log(level)) return;
  if (json_logs) {
    spdlog::log(level, "{}", event_json(event, fields));
    return;
  }
  std::string line(event);
  for (const auto& field : fields) {
    line.push_back(' ');
    line.append(field.key).push_back('=');
    append_value(line, field, false);
  }
  spdlog::log(level, "{}", line);
}

AuditLog::AuditLog(const std::string& path, size_t max_bytes, size_t files) {
  auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(path, max_bytes, files);
  logger_ = std::make_shared<spdlog::logger>("audit", std::move(sink));
  logger_->set_pattern("%v");
  logger_->flush_on(spdlog::level::info);  // an audit line is on disk when its request ends
}

void AuditLog::record(std::string_view event, std::initializer_list<LogField> fields) {
  logger_->info("{}", event_json(event, fields));
}

void AuditLog::flush() { logger_->flush(); }

AuditLog* audit() { return audit_slot().get(); }
void set_audit(std::unique_ptr<AuditLog> log) { audit_slot() = std::move(log); }

}  // namespace sandboxd::ops
