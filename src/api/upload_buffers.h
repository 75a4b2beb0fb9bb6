// An upload's body handed to its file writer without blocking the I/O thread: read
// straight into the writer's buffers (raw bodies), or with room awaited before each
// chunk is fed (multipart bodies). The writer hashes and writes on threads of its own
// (store/body_pipeline.h); the I/O thread only waits, asynchronously, when they lag.
#pragma once

#include <cstddef>
#include <functional>

#include "api/routes.h"
#include "store/atomic_writer.h"

namespace sandboxd::api {

// Resumes once `bytes` (up to one buffer, 1 MiB) can be written to `writer` without
// blocking.
asio::awaitable<void> room_in(store::FileWriter& writer, size_t bytes);

// Buffers for RequestContext::read_body_into: the writer's own; `accept` is asked about
// each read's size first (the owner's quota), then the bytes go to the writer. A write
// failure is answered as upload_error(api, error, path).
server::RequestContext::BodyBuffers writer_buffers(ApiContext& api, store::FileWriter& writer,
                                                   const std::string& path,
                                                   std::function<Result<void>(size_t)> accept);

}  // namespace sandboxd::api
