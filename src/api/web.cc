// The Workspace web page (docs/workspace.md): static files from the web root, served by sandboxd
// itself at `/` (index.html) and `/assets/...`. Only names of letters, digits, '.', '_'
// and '-' in segments that do not start with '.', only known file types, opened with
// openat2(RESOLVE_BENEATH) under the root, every answer with nosniff and a strict
// Content-Security-Policy (the page's own scripts and styles only, no inline code).

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <filesystem>

#include "api/thread_chat.h"

namespace sandboxd::api {
namespace {

namespace fs = std::filesystem;

// frame-src blob: is for the PDF preview: a blob the page's own script made and typed
// application/pdf, which opens only the browser's PDF viewer.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; frame-src blob:; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

std::string_view content_type(std::string_view name) {
  static const std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".json", "application/json"},
      {".txt", "text/plain; charset=utf-8"},
      {".woff2", "font/woff2"}};
  for (const auto& [extension, type] : kTypes)
    if (name.ends_with(extension)) return type;
  return {};
}

// A relative path of plain segments: no "..", no hidden files, nothing to escape.
bool safe_relative_path(std::string_view path) {
  if (path.empty() || path.size() > 256) return false;
  bool segment_start = true;
  for (char c : path) {
    if (c == '/') {
      if (segment_start) return false;  // an empty segment
      segment_start = true;
      continue;
    }
    if (segment_start && c == '.') return false;
    segment_start = false;
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return !segment_start;
}

std::string find_web_root(const std::string& configured) {
  if (!configured.empty()) return configured;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path dir = exe.parent_path();
  for (const fs::path& candidate :
       {dir / ".." / "share" / "sandboxd" / "web", dir / ".." / "web", dir / "web"})
    if (fs::is_regular_file(candidate / "index.html", ec))
      return fs::weakly_canonical(candidate, ec).string();
  return {};
}

class WebRoot {
 public:
  explicit WebRoot(const std::string& path) : path_(path) {
    if (!path.empty()) fd_ = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  }
  ~WebRoot() {
    if (fd_ >= 0) ::close(fd_);
  }
  WebRoot(const WebRoot&) = delete;
  WebRoot& operator=(const WebRoot&) = delete;

  bool usable() const { return fd_ >= 0; }

  Result<Response> serve(const std::string& relative) const {
    if (fd_ < 0)
      return ApiError::not_found(
          "The web page is not installed: set server.webRoot to the folder of sandboxd's web files");
    std::string_view type = content_type(relative);
    if (!safe_relative_path(relative) || type.empty())
      return ApiError::not_found("No such file: /" + relative.substr(0, 200));
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    long fd = syscall(SYS_openat2, fd_, relative.c_str(), &how, sizeof how);
    if (fd < 0) return ApiError::not_found("No such file: /" + relative.substr(0, 200));
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(static_cast<int>(fd));
      return ApiError::not_found("No such file: /" + relative.substr(0, 200));
    }
    server::FileResponse response;
    response.header.version(11);
    response.header.result(http::status::ok);
    response.header.set(http::field::content_type, type);
    response.header.set(http::field::cache_control, "no-cache");
    response.header.set("X-Content-Type-Options", "nosniff");
    response.header.set("Content-Security-Policy", kContentSecurityPolicy);
    response.header.set("Referrer-Policy", "no-referrer");
    response.header.set("X-Frame-Options", "DENY");
    response.fd = static_cast<int>(fd);
    response.length = static_cast<uint64_t>(st.st_size);
    return Response(std::move(response));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// A named coroutine with its arguments by value (see model/tool_loop.cc on GCC 12 and
// capturing lambda coroutines).
asio::awaitable<Result<Response>> serve_file(std::shared_ptr<const WebRoot> root, std::string relative) {
  co_return root->serve(relative);
}

}  // namespace

void install_web_routes(server::HttpServer& http, ApiContext& api) {
  const std::string path = find_web_root(api.config()->web_root);
  auto root = std::make_shared<WebRoot>(path);
  if (path.empty())
    spdlog::warn("web page: no web root found (server.webRoot); `/` answers 404");
  else if (!root->usable())
    spdlog::warn("web page: {} cannot be opened (server.webRoot); `/` answers 404", path);
  else
    spdlog::info("web page: serving {}", path);
  server::RouteOptions open{.authenticated = false};
  http.route(
      http::verb::get, "/", "web.index", [root](RequestContext&) { return serve_file(root, "index.html"); },
      open);
  http.route(
      http::verb::get, "/assets/{path+}", "web.assets",
      [root](RequestContext& ctx) { return serve_file(root, "assets/" + ctx.params["path"]); }, open);
}

}  // namespace sandboxd::api
