#include "api/upload_buffers.h"

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <utility>

#include "api/file_transfer.h"

namespace sandboxd::api {

asio::awaitable<void> room_in(store::FileWriter& writer, size_t bytes) {
  if (writer.room() >= bytes) co_return;
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [&writer, bytes](auto handler) {
        // when_room may call back from one of the writer's threads: the coroutine resumes
        // on its own executor (post goes through the handler's associated executor).
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        writer.when_room(bytes, [shared] { asio::post(std::move(*shared)); });
      },
      asio::use_awaitable);
}

server::RequestContext::BodyBuffers writer_buffers(ApiContext& api, store::FileWriter& writer,
                                                   const std::string& path,
                                                   std::function<Result<void>(size_t)> accept) {
  server::RequestContext::BodyBuffers buffers;
  buffers.lend = [&writer]() -> asio::awaitable<Result<std::span<char>>> {
    std::span<char> lent = writer.lend();
    if (lent.empty()) {
      co_await room_in(writer, 1);
      lent = writer.lend();
    }
    if (lent.empty()) co_return ApiError::internal();  // room_in promised room
    co_return lent;
  };
  buffers.filled = [&api, &writer, path, accept = std::move(accept)](size_t size) -> Result<void> {
    if (auto accepted = accept(size); !accepted) return accepted;
    if (auto filled = writer.fill(size); !filled) return upload_error(api, filled.error(), path);
    return {};
  };
  return buffers;
}

}  // namespace sandboxd::api
