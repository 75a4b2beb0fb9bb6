// Waiting for a condition in a test: the one way the suites wait for something to happen
// (a command to be running, a flush to land, a process to go), never a fixed sleep that
// guesses how long it takes. No timing is asserted: only that it happens within a
// generous bound.
#pragma once

#include <chrono>
#include <thread>

namespace sandboxd::testing {

// Polls `done` every `every` for up to `limit`; true as soon as it holds.
template <typename F>
bool eventually(F done, std::chrono::milliseconds limit = std::chrono::seconds(20),
                std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(every);
  }
  return done();
}

}  // namespace sandboxd::testing
