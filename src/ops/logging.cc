#include "ops/logging.h"

#include <unistd.h>

#include <spdlog/details/os.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "base/utf8.h"

namespace sandboxd::ops {
namespace {

// Byte classes, looked up once per byte: what JSON must escape (or the UTF-8 repair must
// see), and what makes a text-format value need quotes.
constexpr unsigned char kJsonSpecial = 1, kTextSpecial = 2;
constexpr std::array<unsigned char, 256> kByteClass = [] {
  std::array<unsigned char, 256> classes{};
  for (int byte = 0; byte < 256; ++byte)
    if (byte < 0x20 || byte >= 0x80 || byte == '"' || byte == '\\') classes[byte] |= kJsonSpecial;
  for (unsigned char byte : {' ', '"', '=', '\n'}) classes[byte] |= kTextSpecial;
  return classes;
}();

bool has_byte_of(std::string_view text, unsigned char byte_class) {
  for (char c : text)
    if (kByteClass[static_cast<unsigned char>(c)] & byte_class) return true;
  return false;
}

// (Bytes that are not UTF-8, from a request target or a file name, become U+FFFD: a
// JSON log line always parses.)
void append_escaped(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  // Most values (ids, routes, outcomes) are printable ASCII with nothing to escape:
  // appended whole, without the UTF-8 repair's copy or a push per byte.
  if (!has_byte_of(text, kJsonSpecial)) {
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

// Appends the time as 2026-01-02T03:04:05.678Z. The date and time of day change once a
// second: kept per thread, so that a line formats only its milliseconds (gmtime_r takes
// glibc's time zone lock, and every event line has a time).
void append_utc_now(std::string& out) {
  const auto now = std::chrono::system_clock::now();
  const auto since_epoch =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const long long seconds = since_epoch / 1000, ms = since_epoch % 1000;
  thread_local long long cached_seconds = -1;
  thread_local char cached[] = "0000-00-00T00:00:00.";
  auto put = [](char* at, long long value, int digits) {
    for (int i = digits - 1; i >= 0; --i, value /= 10) at[i] = static_cast<char>('0' + value % 10);
  };
  if (seconds != cached_seconds) {
    std::tm tm{};
    const auto whole = static_cast<std::time_t>(seconds);
    gmtime_r(&whole, &tm);
    put(cached, tm.tm_year + 1900, 4);
    put(cached + 5, tm.tm_mon + 1, 2);
    put(cached + 8, tm.tm_mday, 2);
    put(cached + 11, tm.tm_hour, 2);
    put(cached + 14, tm.tm_min, 2);
    put(cached + 17, tm.tm_sec, 2);
    cached_seconds = seconds;
  }
  char fraction[] = "000Z";
  put(fraction, ms, 3);
  out.append(cached, sizeof cached - 1).append(fraction, sizeof fraction - 1);
}

// Numbers as printf would write them (%.3f, %lld), without printf's locale and format
// parsing: std::to_chars is exact and rounds the same way (to nearest, ties to even).
void append_number(std::string& out, double value) {
  char buf[32];
  auto [end, error] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed, 3);
  if (error == std::errc{}) {
    out.append(buf, end);
  } else {  // past 10^27: what snprintf's 32 bytes held before
    std::snprintf(buf, sizeof buf, "%.3f", value);
    out += buf;
  }
}

void append_number(std::string& out, int64_t value) {
  char buf[24];
  auto end = std::to_chars(buf, buf + sizeof buf, value).ptr;
  out.append(buf, end);
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
            const bool plain = !v.empty() && !has_byte_of(v, kTextSpecial);
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
        } else {
          append_number(out, v);
        }
      },
      field.value);
}

bool json_logs = false;

// The lines of the default logger, written into the sink's buffer directly instead of
// through spdlog's pattern machinery (its per-line flag loop, the JSON line copied and
// shifted to insert its level). JSON: events are JSON already and get their level after
// the time; anything else is wrapped ({"time","level","msg"}). Text: byte for byte what
// spdlog's default pattern ("%+") writes: [2026-01-02 03:04:05.678] [name] [level] text,
// in local time, the date and time of day formatted once a second.
class LineFormatter : public spdlog::formatter {
 public:
  explicit LineFormatter(bool json) : json_(json) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    if (json_)
      format_json(msg, dest);
    else
      format_text(msg, dest);
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<LineFormatter>(json_); }

 private:
  static void append(spdlog::memory_buf_t& dest, std::string_view text) {
    dest.append(text.data(), text.data() + text.size());
  }

  void format_json(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    const auto level = spdlog::level::to_string_view(msg.level);
    const std::string_view level_text(level.data(), level.size());
    if (!text.empty() && text.front() == '{') {
      // {"time":…,"event":… → the level after the time.
      auto comma = text.find(',');
      if (comma == std::string_view::npos) comma = text.size() - 1;
      append(dest, text.substr(0, comma));
      append(dest, ",\"level\":\"");
      append(dest, level_text);
      dest.push_back('"');
      append(dest, text.substr(comma));
    } else {
      std::string line = "{\"time\":\"";
      append_utc_now(line);
      line.append("\",\"level\":\"").append(level_text).append("\",\"msg\":\"");
      append_escaped(line, text);
      line += "\"}";
      append(dest, line);
    }
    append(dest, spdlog::details::os::default_eol);
  }

  void format_text(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
    // A line with a source location (SPDLOG_INFO and the like) in spdlog's own words.
    if (!msg.source.empty()) return spdlog_default_.format(msg, dest);
    const auto since_epoch =
        std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    const long long seconds = since_epoch / 1000, ms = since_epoch % 1000;
    if (seconds != cached_seconds_) {
      const std::tm tm = spdlog::details::os::localtime(static_cast<std::time_t>(seconds));
      char text[64];
      const int n = std::snprintf(text, sizeof text, "[%d-%02d-%02d %02d:%02d:%02d.", tm.tm_year + 1900,
                                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
      cached_datetime_.assign(text, static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof text) - 1)));
      cached_seconds_ = seconds;
    }
    // The prefix put together here and appended once (each append to the buffer is a call).
    char prefix[96];
    size_t length = cached_datetime_.size();
    std::memcpy(prefix, cached_datetime_.data(), length);
    const char fraction[] = {static_cast<char>('0' + ms / 100),
                             static_cast<char>('0' + ms / 10 % 10),
                             static_cast<char>('0' + ms % 10),
                             ']',
                             ' ',
                             '['};
    std::memcpy(prefix + length, fraction, sizeof fraction);
    length += sizeof fraction;
    const auto level = spdlog::level::to_string_view(msg.level);
    if (msg.logger_name.size() > 0) {
      append(dest, std::string_view(prefix, length));
      append(dest, std::string_view(msg.logger_name.data(), msg.logger_name.size()));
      std::memcpy(prefix, "] [", 3);
      length = 3;
    }
    std::memcpy(prefix + length, level.data(), level.size());  // at most "critical"
    length += level.size();
    std::memcpy(prefix + length, "] ", 2);
    length += 2;
    append(dest, std::string_view(prefix, length));
    append(dest, std::string_view(msg.payload.data(), msg.payload.size()));
    append(dest, spdlog::details::os::default_eol);
  }

  bool json_;
  // The formatter calls of one sink are serialised by its lock: a member cache is safe.
  long long cached_seconds_ = -1;
  std::string cached_datetime_;
  spdlog::pattern_formatter spdlog_default_;
};

// The audit log's records: the JSON line as it is, as the pattern "%v" wrote it.
class PayloadLineFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    dest.append(msg.payload.data(), msg.payload.data() + msg.payload.size());
    const std::string_view eol = spdlog::details::os::default_eol;
    dest.append(eol.data(), eol.data() + eol.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<PayloadLineFormatter>();
  }
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

// What a line will hold, so that it is allocated once rather than grown field by field:
// the keys and strings as they are (escapes are rare), 24 bytes a number, the quotes,
// separators and the time.
size_t line_estimate(std::string_view event, std::initializer_list<LogField> fields) {
  size_t size = 64 + event.size();
  for (const auto& field : fields) {
    const auto* text = std::get_if<std::string_view>(&field.value);
    size += field.key.size() + 6 + (text ? text->size() : 24);
  }
  return size;
}

std::unique_ptr<AuditLog>& audit_slot() {
  static std::unique_ptr<AuditLog> log;
  return log;
}

}  // namespace

void configure_logging(bool json) {
  json_logs = json;
  if (!isatty(STDOUT_FILENO)) {
    auto previous = spdlog::default_logger();
    auto sink = std::make_shared<StdoutLineSink>();
    sink->set_formatter(std::make_unique<LineFormatter>(false));
    auto logger = std::make_shared<spdlog::logger>(previous->name(), std::move(sink));
    logger->set_level(previous->level());
    logger->flush_on(previous->flush_level());
    spdlog::set_default_logger(std::move(logger));
  }
  if (!json) return;
  spdlog::set_formatter(std::make_unique<LineFormatter>(true));
}

std::unique_ptr<spdlog::formatter> line_formatter(bool json) { return std::make_unique<LineFormatter>(json); }

std::string event_json(std::string_view event, std::initializer_list<LogField> fields) {
  std::string line;
  line.reserve(line_estimate(event, fields));
  line += "{\"time\":\"";
  append_utc_now(line);
  line += "\",\"event\":\"";
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
  std::string line;
  line.reserve(line_estimate(event, fields));
  line += event;
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
  logger_->set_formatter(std::make_unique<PayloadLineFormatter>());
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
