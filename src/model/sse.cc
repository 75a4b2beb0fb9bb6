#include "model/sse.h"

namespace sandboxd::model {

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the second half of a CRLF
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      std::string text;
      text.swap(line_);
      line(text);
      continue;
    }
    line_.push_back(c);
  }
}

void SseParser::line(std::string_view text) {
  if (text.empty()) {  // a blank line dispatches the event
    if (has_data_) {
      SseEvent event{event_.empty() ? "message" : event_, data_};
      on_event_(event);
    }
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (text.front() == ':') return;  // a comment
  std::string_view field = text, value;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    field = text.substr(0, colon);
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "event") {
    event_ = std::string(value);
  } else if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  }
  // "id" and "retry" mean nothing to a Messages client.
}

std::string format_sse(std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(event.size() + data.size() + 16);
  out.append("event: ").append(event).append("\ndata: ").append(data).append("\n\n");
  return out;
}

}  // namespace sandboxd::model
