#include "app/admin_client.h"

#include <curl/curl.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>

namespace sandboxd::app {
namespace {

struct Reply {
  long status = 0;
  std::string body;
  std::string error;  // transport failure
};

size_t collect(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

Reply request(const AdminTarget& target, const char* method, const std::string& path, long timeout_sec = 30) {
  Reply reply;
  CURL* curl = curl_easy_init();
  if (!curl) return {0, {}, "curl_easy_init failed"};
  curl_slist* headers = curl_slist_append(nullptr, ("Authorization: Bearer " + target.token).c_str());
  std::string url = target.url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  url += path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  if (std::string_view(method) == "POST") curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout_sec);
  CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) reply.error = curl_easy_strerror(rc);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return reply;
}

// Prints why a request failed; returns the exit status for it.
int report_failure(const AdminTarget& target, const Reply& reply) {
  if (!reply.error.empty()) {
    std::fprintf(stderr, "sandboxd: cannot reach %s: %s\n", target.url.c_str(), reply.error.c_str());
    return 1;
  }
  std::string message = reply.body;
  boost::system::error_code ec;
  auto parsed = boost::json::parse(reply.body, ec);
  if (!ec && parsed.is_object())
    if (auto* error = parsed.as_object().if_contains("error"); error && error->is_object())
      if (auto* m = error->as_object().if_contains("message"); m && m->is_string()) message = m->as_string();
  std::fprintf(stderr, "sandboxd: HTTP %ld: %s\n", reply.status, message.c_str());
  return 1;
}

std::string human_bytes(uint64_t bytes) {
  char out[32];
  if (bytes >= (1ull << 30))
    std::snprintf(out, sizeof out, "%.1fGi", bytes / 1073741824.0);
  else if (bytes >= (1ull << 20))
    std::snprintf(out, sizeof out, "%.1fMi", bytes / 1048576.0);
  else
    std::snprintf(out, sizeof out, "%.0fKi", bytes / 1024.0);
  return out;
}

std::string human_age(double seconds) {
  char out[32];
  if (seconds >= 3600)
    std::snprintf(out, sizeof out, "%.0fh%02.0fm", seconds / 3600, std::fmod(seconds, 3600) / 60);
  else if (seconds >= 60)
    std::snprintf(out, sizeof out, "%.0fm%02.0fs", std::floor(seconds / 60), std::fmod(seconds, 60));
  else
    std::snprintf(out, sizeof out, "%.0fs", seconds);
  return out;
}

}  // namespace

int admin_ps(const AdminTarget& target) {
  Reply reply = request(target, "GET", "/admin/sandboxes");
  if (!reply.error.empty() || reply.status != 200) return report_failure(target, reply);
  auto listing = boost::json::parse(reply.body).as_object();
  std::printf("%-32s %-16s %8s %8s %9s %8s\n", "CONTAINER", "OWNER", "PID", "AGE", "MEMORY", "COMMANDS");
  for (const auto& row : listing.at("data").as_array()) {
    const auto& s = row.as_object();
    std::printf("%-32s %-16s %8lld %8s %9s %8lld\n", std::string(s.at("container").as_string()).c_str(),
                std::string(s.at("owner").as_string()).c_str(),
                static_cast<long long>(s.at("pid").to_number<int64_t>()),
                human_age(s.at("age_seconds").to_number<double>()).c_str(),
                human_bytes(s.at("memory_bytes").to_number<uint64_t>()).c_str(),
                static_cast<long long>(s.at("executing").to_number<int64_t>()));
  }
  std::printf("(%lld pre-started sandbox(es) waiting)\n",
              static_cast<long long>(listing.at("prestarted").to_number<int64_t>()));
  return 0;
}

int admin_stop(const AdminTarget& target, const std::string& container,
               const std::optional<std::string>& owner) {
  char* escaped = curl_easy_escape(nullptr, container.c_str(), static_cast<int>(container.size()));
  std::string path = std::string("/admin/sandboxes/") + escaped + "/stop";
  curl_free(escaped);
  if (owner) {
    char* o = curl_easy_escape(nullptr, owner->c_str(), static_cast<int>(owner->size()));
    path += std::string("?owner=") + o;
    curl_free(o);
  }
  Reply reply = request(target, "POST", path);
  if (!reply.error.empty() || reply.status != 200) return report_failure(target, reply);
  auto stopped = boost::json::parse(reply.body).as_object();
  std::printf("stopped %s (owner %s); its files are kept\n", container.c_str(),
              std::string(stopped.at("owner").as_string()).c_str());
  return 0;
}

int admin_drain(const AdminTarget& target) {
  // The server bounds a drain by cluster.shutdownGraceSec; this only guards a hang.
  Reply reply = request(target, "POST", "/admin/drain", 3600L);
  if (!reply.error.empty() || reply.status != 200) return report_failure(target, reply);
  auto drained = boost::json::parse(reply.body).as_object();
  std::printf("drained: %lld container(s) released, %lld kept (their flush failed)\n",
              static_cast<long long>(drained.at("released").to_number<int64_t>()),
              static_cast<long long>(drained.at("kept").to_number<int64_t>()));
  return 0;
}

}  // namespace sandboxd::app
