// The certificates every sandbox trusts beyond its system's own: the installation's
// egress CA (server/egress_interception.h), so that code inside reaches a host whose
// HTTPS the server terminates for a header rule without being told of any CA.
//
// The server writes a folder once per start (write_trust_folder): the sandbox system's
// bundle (the image's /etc/ssl/certs/ca-certificates.crt, or the host's) with the CA
// appended, and the CA alone. Both tiers bind that folder read-only at kTrustDir, bind
// its bundle over the system's own where that is a plain file (tools that read only the
// system store: git, wget, Debian's certifi), and every command gets kTrustEnv (tools
// that read only their own: Node, pip's and requests' certifi). Only certificates are
// ever in it: the CA's key stays in its own folder, which no sandbox sees.
#pragma once

#include <array>
#include <string>

namespace sandboxd::runtime {

inline constexpr const char* kTrustDir = "/.sandboxd/trust";
inline constexpr const char* kTrustBundleName = "ca-certificates.crt";  // the system's + the CA
inline constexpr const char* kTrustCaName = "sandboxd-egress-ca.crt";   // the CA alone
// The system bundle of Debian and its derivatives (and Alpine, Arch): OpenSSL's default
// file there, which curl, git, wget, Python's ssl and Debian's certifi read.
inline constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";

// What a command of a sandbox with the folder gets (a command's own value of one of
// these names wins): OpenSSL's (curl, Python's ssl, Ruby, Go and Rust's native stores
// read it too), requests' and pip's (whose own certifi bundle is otherwise all they
// trust), and Node's, which adds it to its own store. Not CURL_CA_BUNDLE: curl reads
// SSL_CERT_FILE already, and requests reads that name too. requests lets the variable
// win over a `verify=` path of a session, and so pip over its `--cert` (requests'
// precedence, psf/requests#3829): code with a CA of its own sets REQUESTS_CA_BUNDLE
// itself (docs/network.md).
inline constexpr std::array<const char*, 3> kTrustEnv = {
    "SSL_CERT_FILE=/.sandboxd/trust/ca-certificates.crt",
    "REQUESTS_CA_BUNDLE=/.sandboxd/trust/ca-certificates.crt",
    "NODE_EXTRA_CA_CERTS=/.sandboxd/trust/sandboxd-egress-ca.crt"};

// Whether `root` + `path` (`path` absolute, "/" for `root` the host) is a regular file
// reached through no symbolic link: a link in an image could lead a read out of it, or
// a bind over it somewhere the sandbox does not see.
bool plain_file_beneath(const std::string& root, const std::string& path);

// Writes `dir` (0755) with kTrustBundleName (the CERTIFICATE blocks of `system_root`'s
// kSystemBundle when it is a plain file of at most 16 MiB, then `ca_pem`'s) and
// kTrustCaName (`ca_pem`'s), each 0644 and replaced whole (a new file renamed over the
// old). `system_root` empty: the host's. Throws std::runtime_error naming the call and
// path that failed, or when `ca_pem` holds no certificate.
void write_trust_folder(const std::string& dir, const std::string& system_root, const std::string& ca_pem);

}  // namespace sandboxd::runtime
