// sandboxd's logs: text (spdlog's usual lines) or JSON lines (logging.format: json),
// one event per line with its fields; and the audit log, an append-only JSON-lines file
// in the data directory (who did what, when), rotated by size.
#pragma once

#include <spdlog/spdlog.h>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

namespace sandboxd::ops {

struct LogField {
  std::string_view key;
  std::variant<std::string_view, int64_t, double, bool> value;
};

// Sets the format of the default logger: JSON wraps every line, plain messages
// included ({"time","level","msg"}).
void configure_logging(bool json);

// The default logger's line format, as configure_logging sets it (for its test): JSON
// lines, or exactly what spdlog's default pattern writes.
std::unique_ptr<spdlog::formatter> line_formatter(bool json);

// One event with fields: `event key=value …` as text, or a JSON object line.
void log_event(spdlog::level::level_enum level, std::string_view event,
               std::initializer_list<LogField> fields);

// The same for a line of the request path (each request's, each execution's): written
// with the next flush (within a second, at once for a warning) rather than by a write
// of its own. Other lines are written at once.
void log_event_batched(spdlog::level::level_enum level, std::string_view event,
                       std::initializer_list<LogField> fields);

// The JSON object for an event (its "time" first), without a newline.
std::string event_json(std::string_view event, std::initializer_list<LogField> fields);

class AuditLog {
 public:
  // `path` is opened for appending; past `max_bytes` it rotates, keeping `files` old ones.
  AuditLog(const std::string& path, size_t max_bytes, size_t files);
  ~AuditLog();
  // Appends a record and flushes the file (with every record before it).
  void record(std::string_view event, std::initializer_list<LogField> fields);
  // Appends a record that a record() of the same request follows (an execution's,
  // before its request's): both reach the file in one write. Within a second anyway
  // (spdlog::flush_every).
  void record_batched(std::string_view event, std::initializer_list<LogField> fields);
  void flush();

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

// The process's audit log (null until serve opens one).
AuditLog* audit();
void set_audit(std::unique_ptr<AuditLog> log);

}  // namespace sandboxd::ops
