#include "server/egress_interception.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace sandboxd::server {
namespace {

namespace fs = std::filesystem;
namespace http = boost::beast::http;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// The most a request or response head may be (as the server's own limit on heads).
constexpr uint32_t kMaxHead = 64 * 1024;
constexpr auto kLeafLifetime = std::chrono::hours(24 * 30);
constexpr auto kLeafRenewBefore = std::chrono::hours(24);
constexpr long kCaLifetimeSeconds = 10L * 365 * 24 * 3600;

// OpenSSL's queue of errors as one message, after the call that failed.
[[noreturn]] void fail(const std::string& call) {
  std::string message = call;
  char buffer[256];
  while (unsigned long error = ERR_get_error()) {
    ERR_error_string_n(error, buffer, sizeof buffer);
    message += ": ";
    message += buffer;
  }
  throw std::runtime_error("egress TLS interception: " + message);
}

struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Bio = std::unique_ptr<BIO, BioFree>;

Pkey new_key() {
  Pkey key(EVP_EC_gen("P-256"));
  if (!key) fail("EVP_EC_gen(P-256)");
  return key;
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!extension) fail(std::string("X509V3_EXT_conf_nid(") + OBJ_nid2sn(nid) + ", " + value + ")");
  const int added = X509_add_ext(cert, extension, -1);
  X509_EXTENSION_free(extension);
  if (!added) fail("X509_add_ext");
}

// A certificate for `key` named `common_name`, valid from an hour ago (clocks differ) for
// `lifetime_seconds`, with a random 128-bit serial; signed by `issuer_key` (and named as
// issued by `issuer`, or by itself when null).
Cert new_certificate(EVP_PKEY* key, const std::string& common_name, long lifetime_seconds, X509* issuer,
                     EVP_PKEY* issuer_key) {
  Cert cert(X509_new());
  if (!cert) fail("X509_new");
  X509_set_version(cert.get(), 2);
  std::array<unsigned char, 16> serial_bytes;
  if (RAND_bytes(serial_bytes.data(), serial_bytes.size()) != 1) fail("RAND_bytes");
  serial_bytes[0] &= 0x7F;  // positive
  BIGNUM* serial = BN_bin2bn(serial_bytes.data(), serial_bytes.size(), nullptr);
  if (!serial || !BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert.get()))) fail("BN_to_ASN1_INTEGER");
  BN_free(serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), lifetime_seconds);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("sandboxd"), -1,
                             -1, 0);
  if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0))
    fail("X509_NAME_add_entry_by_txt(CN=" + common_name + ")");
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  if (!X509_set_pubkey(cert.get(), key)) fail("X509_set_pubkey");
  return cert;
}

void sign(X509* cert, EVP_PKEY* key) {
  if (!X509_sign(cert, key, EVP_sha256())) fail("X509_sign");
}

std::string pem_of(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || !PEM_write_bio_X509(bio.get(), cert)) fail("PEM_write_bio_X509");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("egress TLS interception: reading " + path.string() + ": " + strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `text` to `path` with `mode`, through a temporary file renamed over it (a crash
// leaves the old file or the new one, never half of one).
void write_file(const fs::path& path, const std::string& text, mode_t mode) {
  const fs::path temporary = path.string() + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    throw std::runtime_error("egress TLS interception: open(" + temporary.string() + "): " + strerror(errno));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n <= 0) {
      const int error = errno;
      close(fd);
      throw std::runtime_error("egress TLS interception: write(" + temporary.string() +
                               "): " + strerror(error));
    }
    written += static_cast<size_t>(n);
  }
  if (fchmod(fd, mode) != 0 || fsync(fd) != 0) {
    const int error = errno;
    close(fd);
    throw std::runtime_error("egress TLS interception: fchmod/fsync(" + temporary.string() +
                             "): " + strerror(error));
  }
  close(fd);
  if (rename(temporary.c_str(), path.c_str()) != 0)
    throw std::runtime_error("egress TLS interception: rename(" + temporary.string() + ", " + path.string() +
                             "): " + strerror(errno));
}

// Offers HTTP/1.1 only: the relay reads and writes HTTP/1.1 (a client that would speak
// HTTP/2 falls back to it, as it does with any server that offers only that).
int select_http11(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
                  unsigned int in_length, void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_length, kHttp11, sizeof kHttp11, in, in_length) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;  // none in common: no ALPN, which means HTTP/1.1
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

struct InterceptionCa::Keys {
  Pkey ca_key, leaf_key;
  Cert ca_certificate;
};

InterceptionCa::InterceptionCa(std::unique_ptr<Keys> keys, std::string certificate_pem)
    : keys_(std::move(keys)), certificate_pem_(std::move(certificate_pem)) {}

InterceptionCa::~InterceptionCa() = default;

std::shared_ptr<InterceptionCa> InterceptionCa::load_or_create(const std::string& dir) {
  const fs::path folder(dir), key_path = folder / "ca.key", cert_path = folder / "ca.pem";
  // Only root reads the folder: the key is the power to impersonate any intercepted host
  // to every sandbox of this installation.
  if (mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("egress TLS interception: mkdir(" + folder.string() + "): " + strerror(errno));
  if (chmod(folder.c_str(), 0700) != 0)
    throw std::runtime_error("egress TLS interception: chmod(" + folder.string() +
                             ", 0700): " + strerror(errno));
  auto keys = std::make_unique<Keys>();
  std::error_code ec;
  const bool have_key = fs::exists(key_path, ec), have_cert = fs::exists(cert_path, ec);
  if (have_key != have_cert)
    throw std::runtime_error(
        "egress TLS interception: " + (have_key ? cert_path : key_path).string() +
        " is missing while the other file of the CA is there; restore it, or remove both "
        "to make a new CA (which every sandbox then trusts instead)");
  if (have_key) {
    const std::string key_pem = read_file(key_path), cert_pem = read_file(cert_path);
    Bio key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
    keys->ca_key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
    if (!keys->ca_key) fail("PEM_read_bio_PrivateKey(" + key_path.string() + ")");
    Bio cert_bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
    keys->ca_certificate.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    if (!keys->ca_certificate) fail("PEM_read_bio_X509(" + cert_path.string() + ")");
    if (X509_check_private_key(keys->ca_certificate.get(), keys->ca_key.get()) != 1)
      fail("X509_check_private_key(" + cert_path.string() + ", " + key_path.string() + ")");
    chmod(key_path.c_str(), 0600);
  } else {
    keys->ca_key = new_key();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    keys->ca_certificate =
        new_certificate(keys->ca_key.get(), std::string("sandboxd egress CA (") + host + ")",
                        kCaLifetimeSeconds, nullptr, keys->ca_key.get());
    X509* ca = keys->ca_certificate.get();
    add_extension(ca, ca, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_extension(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_extension(ca, ca, NID_subject_key_identifier, "hash");
    sign(ca, keys->ca_key.get());
    Bio key_bio(BIO_new(BIO_s_mem()));
    if (!key_bio ||
        !PEM_write_bio_PrivateKey(key_bio.get(), keys->ca_key.get(), nullptr, nullptr, 0, nullptr, nullptr))
      fail("PEM_write_bio_PrivateKey");
    char* data = nullptr;
    const long size = BIO_get_mem_data(key_bio.get(), &data);
    std::string key_pem(data, static_cast<size_t>(size));
    write_file(key_path, key_pem, 0600);
    OPENSSL_cleanse(key_pem.data(), key_pem.size());
    write_file(cert_path, pem_of(ca), 0644);
  }
  keys->leaf_key = new_key();
  std::string pem = pem_of(keys->ca_certificate.get());
  return std::shared_ptr<InterceptionCa>(new InterceptionCa(std::move(keys), std::move(pem)));
}

std::shared_ptr<asio::ssl::context> InterceptionCa::server_context(const std::string& host) {
  const auto now = std::chrono::system_clock::now();
  std::lock_guard lock(mutex_);
  if (auto it = leaves_.find(host); it != leaves_.end() && it->second.renew_at > now)
    return it->second.context;
  Cert leaf = new_certificate(keys_->leaf_key.get(), host,
                              std::chrono::duration_cast<std::chrono::seconds>(kLeafLifetime).count(),
                              keys_->ca_certificate.get(), keys_->ca_key.get());
  X509* ca = keys_->ca_certificate.get();
  add_extension(leaf.get(), ca, NID_basic_constraints, "critical,CA:FALSE");
  add_extension(leaf.get(), ca, NID_key_usage, "critical,digitalSignature");
  add_extension(leaf.get(), ca, NID_ext_key_usage, "serverAuth");
  add_extension(leaf.get(), ca, NID_subject_alt_name, ("DNS:" + host).c_str());
  add_extension(leaf.get(), ca, NID_authority_key_identifier, "keyid:always");
  sign(leaf.get(), keys_->ca_key.get());
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* ctx = context->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate(ctx, leaf.get()) != 1) fail("SSL_CTX_use_certificate(" + host + ")");
  if (SSL_CTX_add1_chain_cert(ctx, ca) != 1) fail("SSL_CTX_add1_chain_cert");
  if (SSL_CTX_use_PrivateKey(ctx, keys_->leaf_key.get()) != 1) fail("SSL_CTX_use_PrivateKey");
  SSL_CTX_set_alpn_select_cb(ctx, select_http11, nullptr);
  if (leaves_.size() >= kMaxLeaves && !leaves_.count(host)) {
    auto oldest = std::min_element(leaves_.begin(), leaves_.end(), [](const auto& a, const auto& b) {
      return a.second.made < b.second.made;
    });
    leaves_.erase(oldest);
  }
  leaves_[host] = Leaf{context, now + kLeafLifetime - kLeafRenewBefore, ++made_};
  return context;
}

std::shared_ptr<asio::ssl::context> upstream_tls_context(const std::string& extra_ca_file) {
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX* ctx = context->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (SSL_CTX_set_default_verify_paths(ctx) != 1) fail("SSL_CTX_set_default_verify_paths");
  if (!extra_ca_file.empty() && SSL_CTX_load_verify_locations(ctx, extra_ca_file.c_str(), nullptr) != 1)
    fail("SSL_CTX_load_verify_locations(" + extra_ca_file + ")");
  context->set_verify_mode(asio::ssl::verify_peer);
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx, kHttp11, sizeof kHttp11);
  return context;
}

namespace {

// One message from `in` to `out`, its body streamed through a buffer. `transform` sees
// the head before it is sent. nullopt when it could not be read or sent; else whether the
// connection may carry another message.
template <bool isRequest, typename Transform>
asio::awaitable<std::optional<bool>> relay_message(TlsStream& in, boost::beast::flat_buffer& in_buffer,
                                                   TlsStream& out, uint64_t& bytes, bool head_request,
                                                   Transform transform) {
  http::parser<isRequest, http::buffer_body> parser;
  parser.header_limit(kMaxHead);
  parser.body_limit(boost::none);
  if constexpr (!isRequest) parser.skip(head_request);
  auto [read_error, head_size] = co_await http::async_read_header(in, in_buffer, parser, use_tuple);
  if (read_error) co_return std::nullopt;
  auto& message = parser.get();
  if (!transform(message)) co_return std::nullopt;
  http::serializer<isRequest, http::buffer_body> serializer(message);
  auto [write_error, written] = co_await http::async_write_header(out, serializer, use_tuple);
  if (write_error) co_return std::nullopt;
  bytes += written;
  std::array<char, 16384> chunk;
  while (!parser.is_done()) {
    message.body().data = chunk.data();
    message.body().size = chunk.size();
    auto [body_error, n] = co_await http::async_read(in, in_buffer, parser, use_tuple);
    if (body_error == http::error::need_buffer) body_error = {};
    if (body_error) co_return std::nullopt;
    message.body().size = chunk.size() - message.body().size;
    message.body().data = chunk.data();
    message.body().more = !parser.is_done();
    auto [send_error, sent] = co_await http::async_write(out, serializer, use_tuple);
    if (send_error == http::error::need_buffer) send_error = {};
    if (send_error) co_return std::nullopt;
    bytes += sent;
  }
  if (!serializer.is_done()) {  // the last (empty) chunk of a chunked body
    message.body().data = nullptr;
    message.body().size = 0;
    message.body().more = false;
    auto [send_error, sent] = co_await http::async_write(out, serializer, use_tuple);
    if (send_error && send_error != http::error::need_buffer) co_return std::nullopt;
    bytes += sent;
  }
  co_return message.keep_alive();
}

}  // namespace

asio::awaitable<void> relay_http_setting_headers(TlsStream& inside, TlsStream& outside,
                                                 const HeaderList& headers, RelayBytes& bytes) {
  boost::beast::flat_buffer from_inside, from_outside;
  for (;;) {
    bool head_request = false;
    auto request_kept = co_await relay_message<true>(
        inside, from_inside, outside, bytes.a_to_b, false, [&](http::request<http::buffer_body>& request) {
          // An upgrade (WebSocket, h2c) would carry on without requests to set headers on.
          if (request.find(http::field::upgrade) != request.end()) return false;
          for (const auto& [name, value] : headers) request.set(name, value);
          head_request = request.method() == http::verb::head;
          return true;
        });
    if (!request_kept) break;
    // 1xx answers (100 Continue) come before the final one.
    std::optional<bool> response_kept;
    for (;;) {
      bool interim = false;
      response_kept =
          co_await relay_message<false>(outside, from_outside, inside, bytes.b_to_a, head_request,
                                        [&](http::response<http::buffer_body>& response) {
                                          if (response.result() == http::status::switching_protocols)
                                            return false;
                                          interim = response.result_int() / 100 == 1;
                                          return true;
                                        });
      if (!response_kept || !interim) break;
    }
    if (!response_kept || !*response_kept || !*request_kept) break;
  }
  boost::system::error_code ignored;
  outside.lowest_layer().close(ignored);
  // close_notify to the sandbox's client (a body that ends with the connection is
  // complete only with it), waited for at most a moment: a client that never answers
  // it must not hold the connection.
  asio::steady_timer deadline(inside.get_executor(), std::chrono::seconds(2));
  deadline.async_wait([&inside](boost::system::error_code ec) {
    if (ec) return;
    boost::system::error_code closed;
    inside.lowest_layer().close(closed);
  });
  co_await inside.async_shutdown(use_tuple);
  deadline.cancel();
  inside.lowest_layer().close(ignored);
}

}  // namespace sandboxd::server
