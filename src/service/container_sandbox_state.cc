// A container's sandbox as its strand holds it: the start that others wait for.
#include "service/container_sandbox_state.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace sandboxd::service {

namespace asio = boost::asio;

void ContainerSandboxState::begin_starting(const Strand& strand) {
  starting_ = true;
  started_event_ = std::make_unique<asio::steady_timer>(strand, std::chrono::steady_clock::time_point::max());
}

void ContainerSandboxState::end_starting() {
  starting_ = false;
  started_event_->cancel();
}

asio::awaitable<void> ContainerSandboxState::wait_until_started() {
  while (starting_) {
    boost::system::error_code ec;
    co_await started_event_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace sandboxd::service
