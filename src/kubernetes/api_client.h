// A client of the Kubernetes API for list and watch: HTTPS (verified against the
// cluster's CA) with the service account's bearer token, as a pod finds them
// (KUBERNETES_SERVICE_HOST/PORT, /var/run/secrets/kubernetes.io/serviceaccount/) or as
// the configuration's kubernetes.* keys override. One connection per request;
// coroutines only, nothing blocks an I/O thread (the token is read on the blocking
// pool, it is rotated on disk by the kubelet).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <boost/system/result.hpp>
#include <ostream>  // boost/core/detail/string_view.hpp in 1.81 needs it first

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ops/config.h"

namespace sandboxd::kubernetes {

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ApiEndpoint {
  std::string host, port;
  std::string ca_file, token_file;
  std::string namespace_name;  // sandboxd's own (a podSelector alone selects there)
};

// Where the API is: the settings' values, else the pod's in-cluster ones. nullopt
// with `why` when neither says (not in a pod, no kubernetes.apiServer).
std::optional<ApiEndpoint> find_api_endpoint(const ops::KubernetesSettings& settings, std::string& why);

// A failed request to the Kubernetes API (its own protocol, not one of sandboxd's
// errors: nothing of it reaches a client). `status` is the API's HTTP status (410: the
// resource version is too old, list again), or 0 when the API could not be reached.
struct ApiFailure {
  unsigned status = 0;
  std::string message;
};
inline constexpr unsigned kStatusGone = 410;
// Lets KubeResult<T>::value() throw; callers use has_value()/error() instead.
[[noreturn]] void throw_exception_from_error(const ApiFailure& failure, const boost::source_location& loc);
template <typename T>
using KubeResult = boost::system::result<T, ApiFailure>;
using ApiResult = KubeResult<boost::json::value>;

class ApiClient {
 public:
  ApiClient(boost::asio::any_io_executor executor, ApiEndpoint endpoint);
  ~ApiClient();

  const ApiEndpoint& endpoint() const { return endpoint_; }

  // GET `target` and its JSON body (at most `limit` bytes).
  boost::asio::awaitable<ApiResult> get(const std::string& target, size_t limit);

  // A watch: GET `target` and then each JSON line of its streamed body, to `on_event`
  // until the server ends it, `idle` passes with nothing (bookmarks keep a quiet watch
  // busy), or on_event returns false. A line past `line_limit` ends it with an error.
  class Stream;
  boost::asio::awaitable<KubeResult<void>> watch(const std::string& target, std::chrono::seconds idle,
                                                 size_t line_limit,
                                                 const std::function<bool(boost::json::value)>& on_event,
                                                 const std::function<void()>& on_open);

 private:
  boost::asio::awaitable<KubeResult<std::unique_ptr<Stream>>> connect();
  boost::asio::any_io_executor executor_;
  ApiEndpoint endpoint_;
};

}  // namespace sandboxd::kubernetes
