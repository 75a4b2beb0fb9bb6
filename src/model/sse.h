// Server-sent events (the wire format of streamed Messages): an incremental parser
// that survives any chunking of its input (a line, even a CRLF, split across reads),
// and the writer side's framing.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace sandboxd::model {

struct SseEvent {
  std::string event;  // "message" when the stream names none
  std::string data;   // data lines joined with '\n'
};

class SseParser {
 public:
  using Callback = std::function<void(const SseEvent&)>;
  explicit SseParser(Callback on_event) : on_event_(std::move(on_event)) {}

  // Feeds bytes as they arrive; calls back for every complete event.
  void feed(std::string_view bytes);
  // Bytes held for an unfinished line (a stream that never ends a line grows it).
  size_t pending_bytes() const { return line_.size() + data_.size(); }

 private:
  void line(std::string_view text);

  Callback on_event_;
  std::string line_;
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to it
  std::string event_, data_;
  bool has_data_ = false;
};

// "event: NAME\ndata: JSON\n\n" (the data must not contain newlines; JSON never does).
std::string format_sse(std::string_view event, std::string_view data);

}  // namespace sandboxd::model
