#include "base/blocking.h"

namespace sandboxd {

// Four threads: enough that one slow walk (a container with many files, a large new
// output being hashed) does not hold up the others, few enough not to compete with the
// I/O threads for a small host's cores.
boost::asio::thread_pool& blocking_pool() {
  static boost::asio::thread_pool pool(4);
  return pool;
}

// Two threads: two owners' skill uploads proceed side by side; more wait their turn
// here (each one bounded by runtime.skillMaxFiles and skillMaxSize) while everything
// else goes on.
boost::asio::thread_pool& tree_pool() {
  static boost::asio::thread_pool pool(2);
  return pool;
}

}  // namespace sandboxd
