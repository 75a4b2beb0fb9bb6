#include "store/multipart.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

namespace sandboxd::store {
namespace {

constexpr size_t kMaxBoundaryLength = 70;
// The header block of one part (Content-Disposition, Content-Type, ...). Real clients
// send a few hundred bytes; the cap keeps a hostile body from growing the buffer.
constexpr size_t kMaxHeaderBytes = 16 * 1024;

std::string to_lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool equals_ignore_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [](unsigned char x, unsigned char y) { return std::tolower(x) == std::tolower(y); });
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// RFC 2046 bchars: DIGIT / ALPHA / ' ( ) + _ , - . / : = ? and space (not last).
bool is_valid_boundary(std::string_view boundary) {
  if (boundary.empty() || boundary.size() > kMaxBoundaryLength || boundary.back() == ' ') return false;
  return std::all_of(boundary.begin(), boundary.end(), [](unsigned char c) {
    return std::isalnum(c) ||
           std::string_view("'()+_,-./:=? ").find(static_cast<char>(c)) != std::string_view::npos;
  });
}

struct Parameter {
  std::string name;  // lower case
  std::string value;
};

// Parses `; name=value; name="quoted \"value\""` (RFC 7230 quoted-string: a backslash
// escapes the next character). nullopt on an unterminated quoted string.
std::optional<std::vector<Parameter>> parse_parameters(std::string_view text) {
  std::vector<Parameter> out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ';' || is_space(text[i])) {
      ++i;
      continue;
    }
    size_t name_end = text.find_first_of("=;", i);
    if (name_end == std::string_view::npos) name_end = text.size();
    Parameter parameter{to_lower(trim(text.substr(i, name_end - i))), {}};
    i = name_end;
    if (i < text.size() && text[i] == '=') {
      ++i;
      while (i < text.size() && is_space(text[i])) ++i;
      if (i < text.size() && text[i] == '"') {
        bool closed = false;
        for (++i; i < text.size(); ++i) {
          if (text[i] == '\\' && i + 1 < text.size()) {
            parameter.value.push_back(text[++i]);
          } else if (text[i] == '"') {
            closed = true;
            ++i;
            break;
          } else {
            parameter.value.push_back(text[i]);
          }
        }
        if (!closed) return std::nullopt;
      } else {
        size_t value_end = std::min(text.find(';', i), text.size());
        parameter.value = std::string(trim(text.substr(i, value_end - i)));
        i = value_end;
      }
    }
    if (!parameter.name.empty()) out.push_back(std::move(parameter));
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> strict_percent_decode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    int high = hex_value(text[i + 1]);
    int low = hex_value(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

std::string latin1_to_utf8(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xc0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
    }
  }
  return out;
}

// RFC 5987 ext-value: charset'language'percent-encoded. UTF-8 and ISO-8859-1 only
// (the two the RFC requires); anything else is ignored so filename= applies.
std::optional<std::string> decode_ext_value(std::string_view value) {
  size_t first = value.find('\'');
  size_t second = first == std::string_view::npos ? first : value.find('\'', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  std::string_view charset = value.substr(0, first);
  auto decoded = strict_percent_decode(value.substr(second + 1));
  if (!decoded) return std::nullopt;
  if (equals_ignore_case(charset, "utf-8")) return decoded;
  if (equals_ignore_case(charset, "iso-8859-1")) return latin1_to_utf8(*decoded);
  return std::nullopt;
}

// Fills name and filename from `form-data; name="file"; filename="a.csv"`.
// Returns the reason when the value is unusable.
std::string parse_content_disposition(std::string_view value, PartHeaders& out) {
  size_t semicolon = value.find(';');
  std::string_view type = trim(value.substr(0, semicolon));
  if (!equals_ignore_case(type, "form-data")) return "part is not form-data";
  auto parameters = parse_parameters(semicolon == std::string_view::npos ? "" : value.substr(semicolon + 1));
  if (!parameters) return "malformed Content-Disposition header";
  std::optional<std::string> extended_filename;
  for (auto& parameter : *parameters) {
    if (parameter.name == "name") {
      out.name = std::move(parameter.value);
    } else if (parameter.name == "filename") {
      out.filename = std::move(parameter.value);
    } else if (parameter.name == "filename*") {
      extended_filename = decode_ext_value(parameter.value);
    }
  }
  if (extended_filename) out.filename = std::move(extended_filename);
  return "";
}

// Splits a header block into (name, value) pairs; continuation lines (obsolete line
// folding) join the previous value. Returns the reason when malformed.
std::string parse_header_block(std::string_view block, PartHeaders& out) {
  std::vector<std::pair<std::string, std::string>> fields;
  while (!block.empty()) {
    size_t end = block.find("\r\n");
    std::string_view line = block.substr(0, end);
    block = end == std::string_view::npos ? std::string_view() : block.substr(end + 2);
    if (!line.empty() && is_space(line.front()) && !fields.empty()) {
      fields.back().second.append(" ").append(trim(line));
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || trim(line.substr(0, colon)).empty())
      return "malformed part header";
    fields.emplace_back(to_lower(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
  }
  bool has_disposition = false;
  for (const auto& [name, value] : fields) {
    if (name == "content-disposition" && !has_disposition) {
      has_disposition = true;
      if (auto reason = parse_content_disposition(value, out); !reason.empty()) return reason;
    } else if (name == "content-type" && out.content_type.empty()) {
      out.content_type = value;
    }
  }
  return has_disposition ? "" : "part has no Content-Disposition header";
}

}  // namespace

struct MultipartParser::State {
  enum class Phase {
    kPreamble,      // skipping text before the first boundary
    kBoundaryLine,  // after a delimiter: "--" (the end) or padding and CRLF
    kHeaders,
    kBody,
    kEpilogue,  // after the closing boundary: ignored
    kError,
  };
  enum class LineStep { kStart, kDash, kPadding, kCarriageReturn };

  std::string delimiter;  // CRLF "--" boundary: the CRLF belongs to the delimiter
  OnPart on_part;
  OnData on_data;
  OnPartEnd on_part_end;

  Phase phase = Phase::kPreamble;
  LineStep line_step = LineStep::kStart;
  // Bytes that might be the start of a delimiter split across feeds: always a proper
  // prefix of `delimiter`, so never longer than the boundary plus 3.
  std::string held;
  std::string headers;  // the header block of the current part, until its blank line
  std::string error;
  bool pause_asked = false;  // by a callback: feed_until_pause returns after it

  bool fail(std::string reason) {
    phase = Phase::kError;
    error = std::move(reason);
    return false;
  }

  bool emit(std::string_view data) {
    if (phase != Phase::kBody || data.empty()) return true;  // preamble text is dropped
    return on_data(data) || fail("upload stopped by the receiver");
  }

  enum class HeldOutcome { kDelimiter, kStillPartial, kReleased, kError };

  // Continues a partial match held from the previous feed, looking at no more of
  // `input` than one delimiter length: the delimiter completes (its rest is consumed
  // from `input`), or it is still a prefix (all of `input` was needed to tell), or the
  // held bytes turn out to be content and are passed on.
  HeldOutcome resolve_held(std::string_view& input) {
    std::string window = held;
    window.append(input.substr(0, std::min(input.size(), delimiter.size())));
    for (size_t start = 0; start < held.size(); ++start) {
      size_t length = std::min(window.size() - start, delimiter.size());
      if (window.compare(start, length, delimiter, 0, length) != 0) continue;
      if (!emit(std::string_view(window).substr(0, start))) return HeldOutcome::kError;
      if (length == delimiter.size()) {
        input.remove_prefix(start + delimiter.size() - held.size());
        held.clear();
        return HeldOutcome::kDelimiter;
      }
      held = window.substr(start);
      input = {};
      return HeldOutcome::kStillPartial;
    }
    if (!emit(held)) return HeldOutcome::kError;
    held.clear();
    return HeldOutcome::kReleased;
  }

  // Where the longest tail of `input` that could begin a delimiter starts.
  size_t partial_delimiter_start(std::string_view input) const {
    size_t first = input.size() >= delimiter.size() ? input.size() - delimiter.size() + 1 : 0;
    for (size_t start = first; start < input.size(); ++start) {
      if (input[start] != delimiter[0]) continue;
      std::string_view tail = input.substr(start);
      if (std::string_view(delimiter).substr(0, tail.size()) == tail) return start;
    }
    return input.size();
  }

  // Passes on (body) or drops (preamble) bytes up to the next delimiter. True when a
  // delimiter was crossed, `input` then starting just after it; false when `input` is
  // used up or on error.
  bool advance_to_delimiter(std::string_view& input) {
    if (!held.empty()) {
      HeldOutcome outcome = resolve_held(input);
      if (outcome == HeldOutcome::kDelimiter) return true;
      if (outcome != HeldOutcome::kReleased) return false;
    }
    size_t found = input.find(delimiter);
    if (found != std::string_view::npos) {
      if (!emit(input.substr(0, found))) return false;
      input.remove_prefix(found + delimiter.size());
      return true;
    }
    size_t keep_from = partial_delimiter_start(input);
    if (!emit(input.substr(0, keep_from))) return false;
    held.assign(input.substr(keep_from));
    input = {};
    return false;
  }

  void on_delimiter() {
    if (phase == Phase::kBody && !on_part_end()) {
      fail("upload stopped by the receiver");
      return;
    }
    phase = Phase::kBoundaryLine;
    line_step = LineStep::kStart;
  }

  // The rest of a boundary line: "--" closes the body; otherwise optional spaces
  // (transport padding) and CRLF start the next part's headers.
  void consume_boundary_line(std::string_view& input) {
    while (!input.empty() && phase == Phase::kBoundaryLine) {
      char c = input.front();
      input.remove_prefix(1);
      switch (line_step) {
        case LineStep::kStart:
          if (c == '-') {
            line_step = LineStep::kDash;
            continue;
          }
          [[fallthrough]];
        case LineStep::kPadding:
          if (is_space(c)) {
            line_step = LineStep::kPadding;
          } else if (c == '\r') {
            line_step = LineStep::kCarriageReturn;
          } else {
            fail("malformed boundary line");
          }
          break;
        case LineStep::kDash:
          if (c == '-') {
            phase = Phase::kEpilogue;
          } else {
            fail("malformed boundary line");
          }
          break;
        case LineStep::kCarriageReturn:
          if (c == '\n') {
            phase = Phase::kHeaders;
            headers.clear();
          } else {
            fail("malformed boundary line");
          }
          break;
      }
    }
  }

  // Collects the header block up to its blank line, then announces the part.
  void consume_headers(std::string_view& input) {
    size_t old_size = headers.size();
    size_t room = kMaxHeaderBytes + 4 - old_size;  // +4: the terminating CRLF CRLF
    size_t taken = std::min(input.size(), room);
    headers.append(input.substr(0, taken));

    size_t block_end, terminator_end;
    if (headers.size() >= 2 && headers.compare(0, 2, "\r\n") == 0) {
      block_end = 0;  // no header lines at all
      terminator_end = 2;
    } else {
      size_t found = headers.find("\r\n\r\n", old_size >= 3 ? old_size - 3 : 0);
      if (found == std::string::npos || found > kMaxHeaderBytes) {
        input.remove_prefix(taken);
        if (headers.size() > kMaxHeaderBytes) fail("part headers are too long");
        return;
      }
      block_end = found;
      terminator_end = found + 4;
    }
    input.remove_prefix(terminator_end - old_size);

    PartHeaders part;
    if (auto reason = parse_header_block(std::string_view(headers).substr(0, block_end), part);
        !reason.empty()) {
      fail(reason);
      return;
    }
    headers.clear();
    phase = Phase::kBody;
    held.clear();
    if (!on_part(part)) fail("upload stopped by the receiver");
  }
};

MultipartParser::MultipartParser(std::string boundary, OnPart on_part, OnData on_data, OnPartEnd on_part_end)
    : state_(std::make_shared<State>()) {
  state_->on_part = std::move(on_part);
  state_->on_data = std::move(on_data);
  state_->on_part_end = std::move(on_part_end);
  if (!is_valid_boundary(boundary)) {
    state_->fail("invalid multipart boundary");
    return;
  }
  state_->delimiter = "\r\n--" + boundary;
  // The first boundary may open the body without a preceding line break: pretend
  // one was seen.
  state_->held = "\r\n";
}

bool MultipartParser::feed(std::string_view bytes) {
  while (feed_until_pause(bytes) && !bytes.empty()) {
  }
  return state_->phase != State::Phase::kError;
}

void MultipartParser::pause() { state_->pause_asked = true; }

bool MultipartParser::feed_until_pause(std::string_view& bytes) {
  State& s = *state_;
  using Phase = State::Phase;
  s.pause_asked = false;
  while (s.phase != Phase::kError && s.phase != Phase::kEpilogue) {
    switch (s.phase) {
      case Phase::kPreamble:
      case Phase::kBody:
        if (!s.advance_to_delimiter(bytes)) return s.phase != Phase::kError;
        s.on_delimiter();
        break;
      case Phase::kBoundaryLine:
        if (bytes.empty()) return true;
        s.consume_boundary_line(bytes);
        break;
      case Phase::kHeaders:
        if (bytes.empty()) return true;
        s.consume_headers(bytes);
        break;
      default:
        break;
    }
    if (s.pause_asked) {
      s.pause_asked = false;
      return s.phase != Phase::kError;
    }
  }
  if (s.phase == Phase::kEpilogue) bytes = {};  // the epilogue is ignored
  return s.phase != Phase::kError;
}

bool MultipartParser::finished() const { return state_->phase == State::Phase::kEpilogue; }

const std::string& MultipartParser::error() const { return state_->error; }

std::optional<std::string> MultipartParser::boundary_from_content_type(std::string_view content_type) {
  size_t semicolon = content_type.find(';');
  if (!equals_ignore_case(trim(content_type.substr(0, semicolon)), "multipart/form-data"))
    return std::nullopt;
  if (semicolon == std::string_view::npos) return std::nullopt;
  auto parameters = parse_parameters(content_type.substr(semicolon + 1));
  if (!parameters) return std::nullopt;
  for (const auto& parameter : *parameters) {
    if (parameter.name == "boundary") {
      if (!is_valid_boundary(parameter.value)) return std::nullopt;
      return parameter.value;
    }
  }
  return std::nullopt;
}

}  // namespace sandboxd::store
