#include "service/store_call.h"

#include <spdlog/spdlog.h>

namespace sandboxd::service {

// Eight threads: open_postgres' default pool holds eight connections, so every call
// here can hold one at once; more would only wait for a connection, fewer would leave
// connections idle while requests queue.
boost::asio::thread_pool& store_pool() {
  static boost::asio::thread_pool pool(8);
  return pool;
}

void detail::log_detached_failure(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    spdlog::error("metadata: a background write failed: {}", e.what());
  } catch (...) {
    spdlog::error("metadata: a background write failed");
  }
}

}  // namespace sandboxd::service
