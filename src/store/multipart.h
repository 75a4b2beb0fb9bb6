// A streaming multipart/form-data parser: bytes go in as they arrive from the socket,
// parts come out as callbacks, so an upload of any size is never held in memory.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxd::store {

struct PartHeaders {
  std::string name;                     // Content-Disposition name="..."
  std::optional<std::string> filename;  // filename="..." or filename*=UTF-8''... (decoded)
  std::string content_type;
};

class MultipartParser {
 public:
  // Returns false to stop parsing (the parser then reports an error).
  using OnPart = std::function<bool(const PartHeaders&)>;
  using OnData = std::function<bool(std::string_view chunk)>;
  using OnPartEnd = std::function<bool()>;

  // `boundary` from the Content-Type header (without the leading "--").
  MultipartParser(std::string boundary, OnPart on_part, OnData on_data, OnPartEnd on_part_end);

  // Feeds bytes. Returns false on malformed input or when a callback stopped it;
  // error() says why.
  bool feed(std::string_view bytes);
  // The same, but stops early when the part or part-end callback called pause(): the
  // bytes not parsed yet are left in `bytes`, for the next call (a receiver that has
  // asynchronous work to do between parts: files to close, a slot to wait for).
  bool feed_until_pause(std::string_view& bytes);
  // Called from on_part or on_part_end: feed_until_pause returns after that callback.
  void pause();
  // True once the closing boundary has been seen.
  bool finished() const;
  const std::string& error() const;

  // Extracts boundary=... from a Content-Type value; nullopt if not multipart/form-data
  // or no valid boundary (1-70 chars).
  static std::optional<std::string> boundary_from_content_type(std::string_view content_type);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace sandboxd::store
