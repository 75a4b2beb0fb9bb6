// Egress by policy (network.egress, docs/network.md), from inside a sandbox the way code
// (or an attacker) would try it. No machine here reaches the internet, so the test
// stands up its own "outside": a DNS server of its own that sandboxd uses as its
// resolver (network.egress.resolvers), and HTTP and HTTPS servers (Python's, with a
// certificate made for the test by openssl) on other loopback addresses of the host.
// A real `sandboxd serve` on loopback; curl and Python inside the sandbox.
//
// One suite for both isolation tiers (runtime.isolation), instantiated once per tier by
// egress_test.cc (native) and gvisor_egress_test.cc (gvisor: its own executable, SERIAL
// like the other gvisor suites): the same names, refusals and audit on both.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <thread>

#include "eventually.h"
#include "runtime/gvisor_launcher.h"
#include "server/dns_message.h"
#include "server_harness.h"
#include "tcp_echo.h"

namespace sandboxd::testing {

namespace bj = boost::json;

namespace egress {

// The outside: the allowed servers on 127.1.X.21, the unlisted ones on 127.1.X.22, with
// X free on this host now (another run of this suite may hold ports 80 and 443 of its own
// addresses at the same time).
std::string outside_ip(int x, int host) { return "127.1." + std::to_string(x) + "." + std::to_string(host); }
// A socket bound to ip:port, or -1 when another holds that port.
int bind_port(const std::string& ip, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return fd;
  close(fd);
  return -1;
}
bool port_free(const std::string& ip, uint16_t port) {
  const int fd = bind_port(ip, port);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

// A DNS server of the test's own on 127.0.0.1: the names of the test's outside.
class OutsideDns {
 public:
  explicit OutsideDns(std::map<std::string, std::string> names) : names_(std::move(names)) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
      throw std::runtime_error("bind of the test's DNS server");
    socklen_t length = sizeof address;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    timeval timeout{0, 100000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    thread_ = std::thread([this] { serve(); });
  }
  ~OutsideDns() {
    stopping_ = true;
    thread_.join();
    close(fd_);
  }
  uint16_t port() const { return port_; }
  int queries() const { return queries_.load(); }

 private:
  void serve() {
    char buffer[1500];
    while (!stopping_) {
      sockaddr_in from{};
      socklen_t length = sizeof from;
      ssize_t n = recvfrom(fd_, buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&from), &length);
      if (n <= 0) continue;
      ++queries_;
      auto reply =
          sandboxd::server::dns_reply(std::string_view(buffer, static_cast<size_t>(n)),
                                      [&](const std::string& name) -> std::optional<std::vector<uint32_t>> {
                                        auto it = names_.find(name);
                                        if (it == names_.end()) return std::nullopt;
                                        in_addr address{};
                                        inet_pton(AF_INET, it->second.c_str(), &address);
                                        return std::vector<uint32_t>{ntohl(address.s_addr)};
                                      });
      if (reply) sendto(fd_, reply->data(), reply->size(), 0, reinterpret_cast<sockaddr*>(&from), length);
    }
  }
  std::map<std::string, std::string> names_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> queries_{0};
  std::thread thread_;
};

// An HTTP(S) server that answers every GET with who it is, the Host it was sent and the
// X-Api-Key header when it was sent one (what a header rule sets).
constexpr const char* kWebServer = R"PY(import http.server, ssl, sys
name, address, port, cert = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        key = self.headers.get("X-Api-Key")
        body = ("%s %s %s%s\n" % (name, self.headers.get("Host"), self.path, " key=" + key if key else "")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((address, port), Handler)
if cert != "-":
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert)
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
)PY";

// Builds the package index: a wheel (zipfile, with its dist-info and RECORD) and the
// simple pages that link it with its sha256.
constexpr const char* kMakeIndex = R"PY(import base64, hashlib, os, sys, zipfile
root = sys.argv[1]
os.makedirs(os.path.join(root, "packages"), exist_ok=True)
os.makedirs(os.path.join(root, "simple", "sbxtiny"), exist_ok=True)
name = "sbxtiny-1.0-py3-none-any.whl"
files = {
    "sbxtiny/__init__.py": "VALUE = 42\n",
    "sbxtiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: sbxtiny\nVersion: 1.0\n",
    "sbxtiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: sandboxd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join("%s,%s,%d\n" % (path, digest(text.encode()), len(text.encode())) for path, text in files.items())
record += "sbxtiny-1.0.dist-info/RECORD,,\n"
wheel = os.path.join(root, "packages", name)
with zipfile.ZipFile(wheel, "w") as archive:
    for path, text in files.items():
        archive.writestr(path, text)
    archive.writestr("sbxtiny-1.0.dist-info/RECORD", record)
sha = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
open(os.path.join(root, "simple", "index.html"), "w").write('<a href="sbxtiny/">sbxtiny</a>\n')
open(os.path.join(root, "simple", "sbxtiny", "index.html"), "w").write(
    '<a href="../../packages/%s#sha256=%s">%s</a>\n' % (name, sha, name))
)PY";

// Serves a folder over HTTPS (the package index).
constexpr const char* kIndexServer = R"PY(import http.server, ssl, sys
root, address, cert = sys.argv[1], sys.argv[2], sys.argv[3]
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=root, **kwargs)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((address, 443), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
)PY";

// A TCP server that sends one byte on each connection and then holds it open until
// released: outside connections that stay open while the test looks at the caps.
class HoldServer : public LoopbackServer {
 public:
  HoldServer() : LoopbackServer(0, "hold server") { start_accepting(); }
  ~HoldServer() override {
    release();
    stop_serving();
  }
  int holding() const { return holding_.load(); }
  // Closes every connection held now, and each one made after at once.
  void release() {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
    }
    released_changed_.notify_all();
  }

 private:
  void serve_connection(int fd) override {
    ++holding_;
    if (write(fd, "h", 1) == 1) {
      std::unique_lock lock(mutex_);
      released_changed_.wait(lock, [this] { return released_; });
    }
    --holding_;
  }
  std::mutex mutex_;
  std::condition_variable released_changed_;
  bool released_ = false;
  std::atomic<int> holding_{0};
};

}  // namespace egress

enum class EgressTier { kNative, kGvisor };
inline std::string egress_tier_name(const ::testing::TestParamInfo<EgressTier>& info) {
  return info.param == EgressTier::kNative ? "native" : "gvisor";
}
inline void PrintTo(EgressTier tier, std::ostream* os) {
  *os << (tier == EgressTier::kNative ? "native" : "gvisor");
}

class EgressTest : public ::testing::TestWithParam<EgressTier> {
 protected:
  static void SetUpTestSuite() {
    dir = new fs::path(fs::temp_directory_path() / ("sandboxd-egress-" + std::to_string(getpid())));
    fs::create_directories(*dir);
    std::ofstream(*dir / "web.py") << egress::kWebServer;
    // One certificate for every HTTPS name of the outside (the sandbox is given it as its CA).
    sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=allowed.test "
       "-addext "
       "subjectAltName=DNS:allowed.test,DNS:api.wild.test,DNS:denied.test,DNS:other.test,DNS:pypi.test,"
       "DNS:pypi-unlisted.test,DNS:vendor.test "
       "-keyout " +
       (*dir / "key.pem").string() + " -out " + (*dir / "cert.pem").string() + " 2>/dev/null");
    sh("cat " + (*dir / "cert.pem").string() + " " + (*dir / "key.pem").string() + " > " +
       (*dir / "both.pem").string());
    ca = new std::string(sh("cat " + (*dir / "cert.pem").string()));
    // X is this process's while it holds port 9 of 127.1.X.24 (a bind is atomic: two runs
    // that both found X's web ports free a moment ago do not both take it).
    for (int x = getpid() % 200; !allowed_ip; x = (x + 1) % 250) {
      const int reservation = egress::bind_port(egress::outside_ip(x, 24), 9);
      if (reservation < 0) continue;
      if (egress::port_free(egress::outside_ip(x, 21), 80) &&
          egress::port_free(egress::outside_ip(x, 21), 443) &&
          egress::port_free(egress::outside_ip(x, 22), 80) &&
          egress::port_free(egress::outside_ip(x, 22), 443) &&
          egress::port_free(egress::outside_ip(x, 23), 443)) {
        allowed_ip = new std::string(egress::outside_ip(x, 21));
        unlisted_ip = new std::string(egress::outside_ip(x, 22));
        index_ip = new std::string(egress::outside_ip(x, 23));
        outside_reservation = reservation;
      } else {
        close(reservation);
      }
    }
    start_web("allowed", *allowed_ip, 80, "-");
    start_web("allowed-tls", *allowed_ip, 443, (*dir / "both.pem").string());
    start_web("unlisted", *unlisted_ip, 80, "-");
    start_web("unlisted-tls", *unlisted_ip, 443, (*dir / "both.pem").string());
    start_package_index();
    echo = new TcpEcho();
    hold = new egress::HoldServer();
    dns = new egress::OutsideDns({{"allowed.test", *allowed_ip},
                                  {"api.wild.test", *allowed_ip},
                                  {"wild.test", *allowed_ip},
                                  {"denied.test", *allowed_ip},
                                  {"other.test", *unlisted_ip},
                                  {"host-itself.test", "127.0.0.1"},
                                  {"pypi.test", *index_ip},
                                  {"pypi-unlisted.test", *index_ip},
                                  {"vendor.test", *allowed_ip}});
  }
  // The server, of this process's tier, started by the first test (CTest runs each test
  // in a process of its own).
  void start_server() {
    if (server || skip_reason) return;
    if (GetParam() == EgressTier::kGvisor && sandboxd::runtime::find_runsc().empty()) {
      skip_reason = new std::string("runsc is not installed (Debian: apt-get install runsc)");
      return;
    }
    server = new ServerProcess(config_yaml(""));
  }
  static void TearDownTestSuite() {
    delete server;
    delete dns;
    delete echo;
    delete hold;
    for (pid_t pid : *web_pids) kill(pid, SIGTERM);
    delete web_pids;
    std::error_code ec;
    fs::remove_all(*dir, ec);
    delete dir;
    delete ca;
    delete allowed_ip;
    delete unlisted_ip;
    delete index_ip;
    delete skip_reason;
    close(outside_reservation);
  }
  static void start_web(const std::string& name, const std::string& address, int port,
                        const std::string& cert) {
    if (!web_pids) web_pids = new std::vector<pid_t>;
    web_pids->push_back(
        std::stoi(sh("(python3 " + (*dir / "web.py").string() + " " + name + " " + address + " " +
                     std::to_string(port) + " " + cert + " >/dev/null 2>&1 & echo $!)")));
    const std::string scheme = cert == "-" ? "http" : "https";
    ASSERT_TRUE(eventually([&] {
      return sh("curl -sk -m 2 " + scheme + "://" + address + ":" + std::to_string(port) + "/up")
          .starts_with(name);
    })) << name
        << " on " << address << ":" << port;
  }
  // A package index of the test's own (PEP 503's simple layout) over HTTPS on index_ip,
  // as pypi.test (allowed) and pypi-unlisted.test (not): one wheel, made here with the
  // stdlib's zipfile, whose module says 42.
  static void start_package_index() {
    std::ofstream(*dir / "make_index.py") << egress::kMakeIndex;
    std::ofstream(*dir / "index.py") << egress::kIndexServer;
    sh("python3 " + (*dir / "make_index.py").string() + " " + (*dir / "index").string());
    web_pids->push_back(
        std::stoi(sh("(python3 " + (*dir / "index.py").string() + " " + (*dir / "index").string() + " " +
                     *index_ip + " " + (*dir / "both.pem").string() + " >/dev/null 2>&1 & echo $!)")));
    ASSERT_TRUE(eventually([&] {
      return sh("curl -sk -m 2 https://" + *index_ip + "/simple/sbxtiny/").find("sbxtiny-1.0") !=
             std::string::npos;
    })) << "the package index on "
        << *index_ip;
  }
  // The policy: the test's names, the outside's address (names that resolve to a
  // loopback address need an allow CIDR: the server connects from the host), the echo
  // server's port for raw TCP; `extra` more allow entries.
  // The hosts of header rules are verified with the outside's certificate
  // (upstreamCaFile). `keys`: more keys of network.egress (each "    key: value\n").
  // The tier, and an admin token (the pool's count is on /admin/sandboxes).
  std::string tier_yaml() const {
    return std::string(GetParam() == EgressTier::kGvisor
                           ? "runtime:\n  isolation: gvisor\n  gvisorPlatform: ptrace\n"
                           : "") +
           "auth:\n  adminToken: admin-secret-for-tests-x\n";
  }
  int64_t prestarted_sandboxes() const {
    auto view = server->curl_json(server->url("/admin/sandboxes"), "admin-secret-for-tests-x");
    return view.is_object() && view.as_object().contains("prestarted")
               ? view.at("prestarted").to_number<int64_t>()
               : -1;
  }
  std::string config_yaml(const std::string& extra, const std::string& keys = "") const {
    return tier_yaml() +
           "network:\n  egress:\n    allow: [allowed.test, '*.wild.test', denied.test, host-itself.test, "
           "pypi.test, " +
           *allowed_ip + ", " + *index_ip + ", '127.0.0.1/32:" + std::to_string(echo->port()) + "'" + extra +
           "]\n    deny: [denied.test]\n    resolvers: ['127.0.0.1:" + std::to_string(dns->port()) +
           "']\n    upstreamCaFile: " + (*dir / "cert.pem").string() + "\n" + keys;
  }
  void SetUp() override {
    start_server();
    if (skip_reason) GTEST_SKIP() << *skip_reason;
    // (The parameter's suffix, "/native", is not part of a container id.)
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    container = "eg-" + test.substr(0, test.find('/'));
  }
  bj::object bash(const std::string& command) { return bash_in(container, command); }
  // In another container (of another owner with bob's token); safe from several threads.
  bj::object bash_in(const std::string& in, const std::string& command,
                     const std::string& token = "secret-alice") {
    fs::path file = server->dir() / ("cmd-" + std::to_string(++commands) + ".json");
    std::ofstream(file) << bj::serialize(bj::object{{"command", command}, {"timeout", 60}});
    auto reply = server->curl_json("-X POST '" + server->base() + "/containers/" + in +
                                       "/tools/bash_code_execution' -H 'content-type: application/json' "
                                       "--data-binary @" +
                                       file.string(),
                                   token);
    return reply.is_object() ? reply.as_object() : bj::object{};
  }
  static std::string out(const bj::object& result) {
    return result.contains("stdout") ? std::string(result.at("stdout").as_string()) : "(no result)";
  }
  // curl inside the sandbox: its body, or "exit N" when it failed. Directly (the
  // sandbox's own addresses for the names), unless `proxy`: then through the HTTP proxy
  // its environment names (HTTP_PROXY, HTTPS_PROXY).
  std::string curl(const std::string& args, bool proxy = false) {
    return out(bash("printf '%s' '" + *ca + "' > /tmp/ca.pem; curl -sS -m 20 " +
                    (proxy ? "" : "--noproxy '*' ") + "--cacert /tmp/ca.pem " + args +
                    " 2>/dev/null || echo \"exit $?\""));
  }
  std::string audit() { return sh("cat " + (server->data_dir() / "audit.log").string()); }

  static inline fs::path* dir = nullptr;
  static inline std::string *allowed_ip = nullptr, *unlisted_ip = nullptr, *index_ip = nullptr;
  static inline std::string* ca = nullptr;
  static inline int outside_reservation = -1;
  static inline std::vector<pid_t>* web_pids = nullptr;
  static inline TcpEcho* echo = nullptr;
  static inline egress::HoldServer* hold = nullptr;
  static inline egress::OutsideDns* dns = nullptr;
  static inline ServerProcess* server = nullptr;
  static inline std::string* skip_reason = nullptr;
  std::string container;
  std::atomic<int> commands{0};
};

TEST_P(EgressTest, AnAllowedNameAnswersOverHttpAndHttps) {
  EXPECT_EQ(curl("http://allowed.test/a"), "allowed allowed.test /a\n");
  EXPECT_EQ(curl("https://allowed.test/b"), "allowed-tls allowed.test /b\n");
  // The sandbox still has no route out: the name is an address of the sandbox's own.
  EXPECT_EQ(out(bash("getent hosts allowed.test | cut -d' ' -f1")), "198.18.0.1\n");
  // Python's own HTTPS client, verifying with the CA (the sandbox's Python has no requests).
  auto py =
      bash("printf '%s' '" + *ca +
           "' > /tmp/ca.pem; env -u HTTPS_PROXY -u https_proxy python3 -c \"import ssl, urllib.request; "
           "c = ssl.create_default_context(cafile='/tmp/ca.pem'); "
           "print(urllib.request.urlopen('https://allowed.test/py', context=c).read().decode(), end='')\"");
  EXPECT_EQ(out(py), "allowed-tls allowed.test /py\n") << bj::serialize(py);
  // Each connection is in the audit log, with its bytes.
  const std::string log = audit();
  EXPECT_NE(log.find("\"destination\":\"allowed.test\",\"port\":443,\"address\":\"" + *allowed_ip + "\""),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("\"result\":\"allowed\""), std::string::npos) << log;
  EXPECT_GT(server->metric("sandboxd_egress_connections_total{result=\"allowed\"}"), 2);
  EXPECT_GT(server->metric("sandboxd_egress_bytes_total{direction=\"in\"}"), 100);
}

TEST_P(EgressTest, TheResolverAnswersOverTcpAndOverUdpOnTheNativeTier) {
  // A query for allowed.test (A, IN) built by hand, asked over TCP with its two-byte
  // length (RFC 7766), as a resolver with `use-vc` (the gvisor tier's) or one with a
  // truncated answer asks, then over UDP. TCP carries the sandbox's own address for the
  // name on both tiers; UDP the same answer on the native tier, and none on the gvisor
  // tier, whose PID 1 relays connections, not datagrams.
  auto result = bash(R"(python3 - <<'PY'
import socket, struct
query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
for label in b"allowed.test".split(b"."):
    query += bytes([len(label)]) + label
query += b"\0" + struct.pack(">HH", 1, 1)
t = socket.create_connection(("127.0.2.53", 53), timeout=10)
t.sendall(struct.pack(">H", len(query)) + query)
def read(n):
    data = b""
    while len(data) < n:
        chunk = t.recv(n - len(data))
        if not chunk: raise SystemExit("closed after %d bytes" % len(data))
        data += chunk
    return data
tcp = read(struct.unpack(">H", read(2))[0])
print(socket.inet_ntoa(tcp[-4:]), tcp[:2] == b"\x12\x34")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
u.sendto(query, ("127.0.2.53", 53))
try:
    print("udp", u.recv(512) == tcp)
except OSError:
    print("udp none")
PY
)");
  EXPECT_EQ(out(result), std::string("198.18.0.1 True\n") +
                             (GetParam() == EgressTier::kGvisor ? "udp none\n" : "udp True\n"))
      << bj::serialize(result);
}

TEST_P(EgressTest, AWildcardMatchesASubdomainButNotTheApex) {
  EXPECT_EQ(curl("https://api.wild.test/w"), "allowed-tls api.wild.test /w\n");
  EXPECT_EQ(curl("http://wild.test/"), "exit 6\n") << "the apex does not resolve";
}

TEST_P(EgressTest, DeniedAndUnlistedNamesDoNotResolve) {
  EXPECT_EQ(curl("http://denied.test/"), "exit 6\n");
  EXPECT_EQ(curl("https://other.test/"), "exit 6\n");
  EXPECT_EQ(out(bash("getent hosts other.test denied.test; echo $?")), "2\n");
  // Nor does any other resolver help: every address but the sandbox's own is local.
  EXPECT_EQ(curl("--resolve other.test:80:" + *unlisted_ip + " http://other.test/"), "exit 7\n");
}

TEST_P(EgressTest, AForgedHostOrServerNameCannotReachAnUnlistedServer) {
  // The allowed name's address with another name inside: refused, never relayed to the
  // name it carries (which is the unlisted server's).
  EXPECT_EQ(curl("-H 'Host: other.test' http://allowed.test/"), "exit 56\n");
  const std::string forged_sni = curl("--resolve other.test:443:198.18.0.1 https://other.test/");
  EXPECT_TRUE(forged_sni == "exit 35\n" || forged_sni == "exit 56\n") << forged_sni;
  EXPECT_EQ(curl("--resolve allowed.test:80:198.18.0.1 http://allowed.test/ok"), "allowed allowed.test /ok\n")
      << "the same address with its own name still works";
  const std::string log = audit();
  EXPECT_NE(log.find("the Host 'other.test' is not the name this connection was resolved for"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("the TLS server name 'other.test' is not the name"), std::string::npos) << log;
  EXPECT_EQ(log.find("\"address\":\"" + *unlisted_ip + "\""), std::string::npos)
      << "nothing reached the unlisted server";
}

TEST_P(EgressTest, AnAllowedNameThatResolvesToTheHostItselfIsRefused) {
  EXPECT_EQ(out(bash("getent hosts host-itself.test | cut -d' ' -f1")), "198.18.0.1\n");
  EXPECT_EQ(curl("http://host-itself.test/"), "exit 56\n");
  EXPECT_NE(audit().find("host-itself.test resolves only to addresses the policy does not allow (127.0.0.1)"),
            std::string::npos);
}

TEST_P(EgressTest, ACidrEntryAllowsRawTcpOnItsPort) {
  const std::string port = std::to_string(echo->port());
  const bj::object echoed = bash("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', " +
                                 port + "), timeout=10); s.sendall(b'ping'); print(s.recv(4).decode())\"");
  // (On a failure: what the sandbox saw, its routes, and what the server said of its network.)
  EXPECT_EQ(out(echoed), "ping\n") << bj::serialize(echoed) << "\n"
                                   << out(bash("cat /proc/net/tcp /proc/net/fib_trie")) << server->log();
  // Another address on that port is not in the entry: closed at once with a reset.
  const bj::object refused =
      bash("python3 -c \"import socket, sys\ntry:\n s = socket.create_connection(('10.9.9.9', " + port +
           "), timeout=10); s.sendall(b'x'); print(len(s.recv(4)))\nexcept OSError as e: "
           "print(type(e).__name__); print(e, file=sys.stderr)\"");
  const std::string other = out(refused);
  EXPECT_TRUE(other == "ConnectionResetError\n" || other == "0\n") << bj::serialize(refused);
  EXPECT_NE(audit().find("\"destination\":\"10.9.9.9\""), std::string::npos);
}

TEST_P(EgressTest, AReloadedPolicyAppliesToTheNextConnection) {
  EXPECT_EQ(curl("http://allowed.test/before"), "allowed allowed.test /before\n");
  // allowed.test now denied as well: the running sandbox's next connection is refused.
  std::string yaml = config_yaml("");
  yaml.replace(yaml.find("deny: [denied.test]"), 19, "deny: [denied.test, allowed.test]");
  server->write_config(yaml);
  EXPECT_NE(server->reload().find("SIGHUP"), std::string::npos);
  EXPECT_EQ(curl("http://allowed.test/after"), "exit 6\n") << "the name no longer resolves";
  // And its address, known from before: refused (reset, or no longer listened on). The
  // reset reaches curl while it sends (55) or while it waits for the answer (56).
  const std::string known = curl("--resolve allowed.test:80:198.18.0.1 http://allowed.test/after");
  EXPECT_TRUE(known == "exit 55\n" || known == "exit 56\n" || known == "exit 7\n") << known;
  server->write_config(config_yaml(""));
  server->reload();
  EXPECT_EQ(curl("http://allowed.test/again"), "allowed allowed.test /again\n");
}

TEST_P(EgressTest, ACidrPortAddedOrRemovedByAReloadReachesTheSandboxesAlreadyRunning) {
  // The sandbox runs (and the pool's spares wait) before a second echo server's port is
  // allowed: the reload opens that port's listener in each of them, a later one closes it.
  TcpEcho other;
  const std::string port = std::to_string(other.port());
  const std::string ping = "python3 -c \"import socket\ntry:\n s = socket.create_connection(('127.0.0.1', " +
                           port +
                           "), timeout=10); s.sendall(b'ping'); print(s.recv(4).decode() or 'closed')\n"
                           "except OSError as e: print(type(e).__name__)\"";
  EXPECT_EQ(out(bash(ping)), "ConnectionRefusedError\n");
  server->write_config(config_yaml(", '127.0.0.1/32:" + port + "'"));
  EXPECT_NE(server->reload().find("SIGHUP"), std::string::npos);
  EXPECT_EQ(out(bash(ping)), "ping\n");
  // Another container, on a spare started before the reload.
  EXPECT_EQ(out(bash_in(container + "-spare", ping)), "ping\n");
  server->write_config(config_yaml(""));
  EXPECT_NE(server->reload().find("SIGHUP"), std::string::npos);
  // Refused in the sandbox's namespace; on the gvisor tier the sentry's relay of the port
  // still accepts, and resets the connection once the server's end refuses it.
  const std::string after = out(bash(ping));
  EXPECT_TRUE(
      after == "ConnectionRefusedError\n" ||
      (GetParam() == EgressTier::kGvisor && (after == "ConnectionResetError\n" || after == "closed\n")))
      << after;
}

TEST_P(EgressTest, APolicyOpenedByAReloadReachesANewContainerThoughTheSparesWereStartedClosed) {
  // Closed by a reload: a new container finds no outside name (the spares started while
  // it was open are not handed out), and the pool fills again under the closed policy.
  server->write_config(tier_yaml());
  EXPECT_NE(server->reload().find("configuration reloaded"), std::string::npos);
  container += "-closed";
  EXPECT_EQ(curl("http://allowed.test/closed"), "exit 6\n");
  ASSERT_TRUE(eventually([&] { return prestarted_sandboxes() >= 2; }, std::chrono::seconds(60)));
  // Opened again: the next container resolves the name, though every spare waiting was
  // started with no resolver in its /etc/resolv.conf.
  server->write_config(config_yaml(""));
  EXPECT_NE(server->reload().find("configuration reloaded"), std::string::npos);
  container += "-opened";
  EXPECT_EQ(curl("http://allowed.test/opened"), "allowed allowed.test /opened\n");
}

TEST_P(EgressTest, TheHttpProxyReachesAllowedNamesAndRefusesTheRest) {
  EXPECT_EQ(out(bash("echo $HTTP_PROXY $HTTPS_PROXY")), "http://127.0.2.3:3128 http://127.0.2.3:3128\n");
  // CONNECT (curl -x, and HTTPS_PROXY from the environment) and a plain absolute-URI GET.
  EXPECT_EQ(curl("-x http://127.0.2.3:3128 https://allowed.test/c", true), "allowed-tls allowed.test /c\n");
  EXPECT_EQ(curl("https://api.wild.test/e", true), "allowed-tls api.wild.test /e\n");
  EXPECT_EQ(curl("http://allowed.test/g?q=1", true), "allowed allowed.test /g?q=1\n");
  // Python's urllib takes the proxy from the environment.
  auto py =
      bash("printf '%s' '" + *ca +
           "' > /tmp/ca.pem; python3 -c \"import ssl, urllib.request; "
           "c = ssl.create_default_context(cafile='/tmp/ca.pem'); "
           "print(urllib.request.urlopen('https://allowed.test/u', context=c).read().decode(), end=''); "
           "print(urllib.request.urlopen('http://allowed.test/v').read().decode(), end='')\"");
  EXPECT_EQ(out(py), "allowed-tls allowed.test /u\nallowed allowed.test /v\n") << bj::serialize(py);
  // Refused: 403 for what the policy does not allow (unlisted, denied, the apex of a
  // wildcard, a port not open for the name, the host's own address), 400 for a Host
  // that differs from the URL.
  // The proxy's answer: to a CONNECT (HTTPS) or to a plain request (HTTP).
  auto connect_status = [&](const std::string& args) {
    return out(bash("curl -s -m 20 -o /dev/null -w '%{http_connect}' " + args + "; echo"));
  };
  auto get_status = [&](const std::string& args) {
    return out(bash("curl -s -m 20 -o /dev/null -w '%{http_code}' " + args + "; echo"));
  };
  EXPECT_EQ(connect_status("https://other.test/"), "403\n");
  EXPECT_EQ(connect_status("https://denied.test/"), "403\n");
  EXPECT_EQ(get_status("http://wild.test/"), "403\n");
  EXPECT_EQ(get_status("http://other.test/"), "403\n");
  EXPECT_EQ(connect_status("https://allowed.test:8443/"), "403\n");
  // (--noproxy '': through the proxy even for 127.0.0.1, which NO_PROXY lists.)
  EXPECT_EQ(connect_status("--noproxy '' -p http://127.0.0.1:22/"), "403\n");
  EXPECT_EQ(get_status("-H 'Host: other.test' http://allowed.test/"), "400\n");
  // A name that resolves to the host itself: refused after the lookup.
  EXPECT_EQ(get_status("http://host-itself.test/"), "403\n");
  const std::string log = audit();
  EXPECT_NE(log.find("\"destination\":\"other.test\",\"port\":443"), std::string::npos) << log;
  EXPECT_NE(log.find("port 8443 is not allowed for allowed.test"), std::string::npos) << log;
  EXPECT_NE(log.find("the Host header names another host than the URL"), std::string::npos) << log;
  EXPECT_EQ(log.find("\"address\":\"" + *unlisted_ip + "\""), std::string::npos)
      << "nothing reached the unlisted server";
  EXPECT_GE(server->metric("sandboxd_egress_refused_total{reason=\"policy\"}"), 6);
}

TEST_P(EgressTest, PipInstallsFromAnAllowedPackageIndexOnly) {
  // pip through the proxy its environment names (HTTPS_PROXY), trusting the test's CA
  // (REQUESTS_CA_BUNDLE as well as --cert: requests lets the variable the sandbox has
  // win over pip's --cert); no retries, so that a refusal is an answer at once.
  auto pip = [&](const std::string& index) {
    return out(bash("printf '%s' '" + *ca +
                    "' > /tmp/ca.pem; rm -rf /tmp/site; PIP_CONFIG_FILE=/dev/null "
                    "REQUESTS_CA_BUNDLE=/tmp/ca.pem python3 -m pip install "
                    "--disable-pip-version-check --no-cache-dir --retries 0 --timeout 20 --cert /tmp/ca.pem "
                    "--target /tmp/site --index-url https://" +
                    index +
                    "/simple/ sbxtiny >/tmp/pip.log 2>&1; echo \"pip $?\"; "
                    "PYTHONPATH=/tmp/site python3 -c 'import sbxtiny; print(sbxtiny.VALUE)' 2>/dev/null"));
  };
  EXPECT_EQ(pip("pypi.test"), "pip 0\n42\n");
  EXPECT_EQ(pip("pypi-unlisted.test"), "pip 1\n");
  // The proxy refused its CONNECT (pip's own message for it is not shown at its default
  // verbosity): the audit log says so.
  const std::string log = audit();
  EXPECT_NE(log.find("\"destination\":\"pypi-unlisted.test\",\"port\":443,\"address\":\"\""),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("\"result\":\"refused\",\"reason\":\"not allowed by network.egress.allow\""),
            std::string::npos)
      << log;
}

TEST_P(EgressTest, OutsideConnectionsAreCappedPerSandbox) {
  // 32 connections held open to the echo server (raw TCP: relayed at once, each echoes a
  // byte), then one more: reset at once by the cap; the held ones still work.
  const std::string port = std::to_string(echo->port());
  const std::string result =
      out(bash("python3 -c \"import socket\n"
               "held = []\n"
               "for i in range(32):\n"
               " s = socket.create_connection(('127.0.0.1', " +
               port +
               "), timeout=10); s.sendall(b'a'); s.recv(1); "
               "held.append(s)\n"
               "try:\n b = socket.create_connection(('127.0.0.1', " +
               port +
               "), timeout=10); b.sendall(b'b'); "
               "print(len(b.recv(1)))\nexcept OSError as e: print(type(e).__name__)\n"
               "held[0].sendall(b'c'); print(held[0].recv(1).decode())\""));
  EXPECT_TRUE(result == "ConnectionResetError\nc\n" || result == "0\nc\n") << result;
  EXPECT_NE(
      audit().find("the sandbox has 32 outside connections open (network.egress.maxConnectionsPerSandbox)"),
      std::string::npos);
  EXPECT_GE(server->metric("sandboxd_egress_refused_total{reason=\"sandbox_limit\"}"), 1);
  // Given back when they closed (at the relays' end, a moment after the command's).
  EXPECT_TRUE(eventually([&] {
    return out(bash("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', " + port +
                    "), timeout=10); s.sendall(b'ping'); print(s.recv(4).decode())\"")) == "ping\n";
  }));
}

TEST_P(EgressTest, OutsideConnectionsAreCappedPerOwnerAcrossItsSandboxes) {
  // Caps small enough to reach, set by a reload (they apply to the next connection): 3
  // per sandbox, 4 per owner; the hold server's port allowed for raw TCP.
  const std::string port = std::to_string(hold->port());
  server->write_config(config_yaml(", '127.0.0.1/32:" + port + "'",
                                   "    maxConnectionsPerSandbox: 3\n    maxConnectionsPerOwner: 4\n"));
  EXPECT_NE(server->reload().find("SIGHUP"), std::string::npos);
  // Opens `n` connections to the hold server, each answered with its byte or the error
  // (a refused one is reset at once: its read fails or ends), then waits until the hold
  // server lets go of those it holds.
  auto hold_script = [&](int n) {
    return "python3 -c \"import socket\nheld = []\nfor i in range(" + std::to_string(n) +
           "):\n try:\n  s = socket.create_connection(('127.0.0.1', " + port +
           "), timeout=60); r = s.recv(1); print(r.decode() or 'closed', flush=True); held.append(s)\n"
           " except OSError as e: print(type(e).__name__, flush=True)\n"
           "for s in held:\n try: s.recv(1)\n except OSError: pass\nprint('released')\"";
  };
  // alice's first sandbox holds 2 while her second one (and bob's) try theirs.
  const std::string first = container + "-a", second = container + "-b", bobs = container + "-bob";
  std::string first_out;
  std::thread holding([&] { first_out = out(bash_in(first, hold_script(2))); });
  const bool held = eventually([&] { return hold->holding() >= 2; }, std::chrono::seconds(60));
  std::string second_out, bob_out;
  if (held) {
    // 2 more of alice's reach the owner's 4; the third is refused though her second
    // sandbox has only 2 (its own cap is 3). bob's are counted apart: his sandbox
    // reaches its own cap of 3, and the fourth is refused for that.
    std::thread second_holding([&] { second_out = out(bash_in(second, hold_script(3))); });
    std::thread bob_holding([&] { bob_out = out(bash_in(bobs, hold_script(4), "secret-bob-x")); });
    EXPECT_TRUE(eventually([&] { return hold->holding() >= 7; }, std::chrono::seconds(60)))
        << hold->holding();
    EXPECT_TRUE(eventually([&] {
      const std::string log = audit();
      return log.find("the owner's sandboxes have 4 outside connections open") != std::string::npos &&
             log.find("the sandbox has 3 outside connections open") != std::string::npos;
    })) << audit();
    hold->release();
    second_holding.join();
    bob_holding.join();
  }
  hold->release();
  holding.join();
  ASSERT_TRUE(held) << first_out;
  EXPECT_EQ(first_out, "h\nh\nreleased\n");
  EXPECT_TRUE(second_out == "h\nh\nConnectionResetError\nreleased\n" ||
              second_out == "h\nh\nclosed\nreleased\n")
      << second_out;
  EXPECT_TRUE(bob_out == "h\nh\nh\nConnectionResetError\nreleased\n" ||
              bob_out == "h\nh\nh\nclosed\nreleased\n")
      << bob_out;
  const std::string log = audit();
  EXPECT_NE(log.find("the owner's sandboxes have 4 outside connections open "
                     "(network.egress.maxConnectionsPerOwner)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("\"owner\":\"bob\""), std::string::npos) << log;
  EXPECT_GE(server->metric("sandboxd_egress_refused_total{reason=\"owner_limit\"}"), 1);
  EXPECT_GE(server->metric("sandboxd_egress_refused_total{reason=\"sandbox_limit\"}"), 1);
  server->write_config(config_yaml(""));
  server->reload();
}

TEST_P(EgressTest, AHeaderRuleAddsItsCredentialOnItsHostOnlyAndTheSandboxNeverSeesIt) {
  // vendor.test (allowed) has a rule; allowed.test has none. The secret is written here
  // split in two, so that no command below carries it whole.
  const std::string secret = std::string("sbx-secret-") + "4417";
  server->write_config(config_yaml(
      ", vendor.test", "    rules: [ { host: vendor.test, headers: { X-Api-Key: " + secret + " } } ]\n"));
  EXPECT_NE(server->reload().find("SIGHUP"), std::string::npos);
  // The installation's CA, as the sandbox would trust it.
  const std::string installation_ca = sh("cat " + (server->data_dir() / "egress-ca" / "ca.pem").string());
  ASSERT_NE(installation_ca.find("BEGIN CERTIFICATE"), std::string::npos);
  auto with_ca = [&](const std::string& command) {
    return out(bash("printf '%s' '" + installation_ca + "' > /tmp/sbxca.pem; " + command));
  };
  // curl, directly and through the proxy (CONNECT), and Python's own HTTPS client: the
  // outside server sees the header.
  EXPECT_EQ(with_ca("curl -sS -m 20 --noproxy '*' --cacert /tmp/sbxca.pem https://vendor.test/d"),
            "allowed-tls vendor.test /d key=" + secret + "\n");
  EXPECT_EQ(with_ca("curl -sS -m 20 --cacert /tmp/sbxca.pem https://vendor.test/p"),
            "allowed-tls vendor.test /p key=" + secret + "\n");
  EXPECT_EQ(
      with_ca("env -u HTTPS_PROXY -u https_proxy python3 -c \"import ssl, urllib.request; "
              "c = ssl.create_default_context(cafile='/tmp/sbxca.pem'); "
              "print(urllib.request.urlopen('https://vendor.test/py', context=c).read().decode(), end='')\""),
      "allowed-tls vendor.test /py key=" + secret + "\n");
  // Keep-alive: two requests on one connection, each with the header.
  EXPECT_EQ(with_ca("curl -sS -m 20 --noproxy '*' --cacert /tmp/sbxca.pem https://vendor.test/1 "
                    "https://vendor.test/2"),
            "allowed-tls vendor.test /1 key=" + secret + "\nallowed-tls vendor.test /2 key=" + secret + "\n");
  // HTTPS only: plain HTTP to the same host carries nothing (it would go in the clear).
  EXPECT_EQ(curl("http://vendor.test/plain"), "allowed vendor.test /plain\n");
  // Another allowed host is not intercepted: the client sees the outside server's own
  // certificate (the test's, which --cacert trusts), and the installation CA's would fail.
  EXPECT_EQ(curl("https://allowed.test/own"), "allowed-tls allowed.test /own\n");
  EXPECT_EQ(
      with_ca("curl -sS -m 20 --noproxy '*' --cacert /tmp/sbxca.pem https://allowed.test/ 2>/dev/null || "
              "echo \"exit $?\""),
      "exit 60\n");
  // Nowhere inside: not in the environment, /etc, /proc or the workspace (the pattern
  // is split too, so that it matches nothing of the command itself).
  const std::string pattern = "'sbx-secre[t]-4417'";
  EXPECT_EQ(out(bash("env | grep -c " + pattern + "; grep -c " + pattern + " /proc/self/environ; grep -rls " +
                     pattern + " /etc $HOME /mnt/user-data /tmp | wc -l")),
            "0\n0\n0\n");
  // Nor in what the server logs and audits (the destination and bytes, never headers).
  EXPECT_EQ(audit().find(secret), std::string::npos);
  EXPECT_EQ(server->log().find(secret), std::string::npos);
  EXPECT_NE(audit().find("\"destination\":\"vendor.test\",\"port\":443,\"address\":\"" + *allowed_ip + "\""),
            std::string::npos);
  server->write_config(config_yaml(""));
  server->reload();
}

TEST_P(EgressTest, CodeInsideTrustsTheInstallationCaWithNoCaOfItsOwn) {
  const std::string secret = std::string("sbx-secret-") + "5521";
  server->write_config(config_yaml(
      ", vendor.test", "    rules: [ { host: vendor.test, headers: { X-Api-Key: " + secret + " } } ]\n"));
  EXPECT_NE(server->reload().find("SIGHUP"), std::string::npos);
  auto answer = [&](const std::string& path) {
    return "allowed-tls vendor.test " + path + " key=" + secret + "\n";
  };
  // curl, directly and through the proxy (CONNECT), with no --cacert: its environment
  // names the bundle.
  EXPECT_EQ(out(bash("curl -sS -m 20 --noproxy '*' https://vendor.test/c 2>&1")), answer("/c"));
  EXPECT_EQ(out(bash("curl -sS -m 20 https://vendor.test/cp 2>&1")), answer("/cp"));
  // Python's default context (SSL_CERT_FILE), and with that unset: OpenSSL's own default
  // file, the system bundle the server's is bound over. (The image has no `requests`;
  // REQUESTS_CA_BUNDLE names the same bundle, checked below.)
  const std::string python =
      " python3 -c \"import urllib.request; "
      "print(urllib.request.urlopen('https://vendor.test/PATH').read().decode(), end='')\" 2>&1";
  auto python_get = [&](const std::string& unset, const std::string& path) {
    std::string command = "env -u HTTPS_PROXY -u https_proxy " + unset + python;
    command.replace(command.find("PATH"), 4, path.substr(1));
    return out(bash(command));
  };
  EXPECT_EQ(python_get("", "/py"), answer("/py"));
  EXPECT_EQ(python_get("-u SSL_CERT_FILE", "/system"), answer("/system"));
  // Node, which reads its own store and NODE_EXTRA_CA_CERTS.
  EXPECT_EQ(out(bash("node -e \"require('https').get('https://vendor.test/js', (r) => { let b = ''; "
                     "r.setEncoding('utf8'); r.on('data', (d) => (b += d)); r.on('end', () => "
                     "process.stdout.write(b)); }).on('error', (e) => console.log(e.message))\" 2>&1")),
            answer("/js"));
  // The CA is trusted for the hosts the server intercepts only: another allowed host
  // presents its own certificate (the test's), which nothing inside trusts.
  EXPECT_EQ(out(bash("curl -sS -m 20 --noproxy '*' https://allowed.test/ 2>/dev/null || echo \"exit $?\"")),
            "exit 60\n");
  // The environment names the folder.
  EXPECT_EQ(out(bash("printenv SSL_CERT_FILE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS")),
            "/.sandboxd/trust/ca-certificates.crt\n/.sandboxd/trust/ca-certificates.crt\n"
            "/.sandboxd/trust/sandboxd-egress-ca.crt\n");
  // The bundle: the system's certificates and the CA, the same file at the system's
  // place, read-only; no key in it, and nothing of the CA's key anywhere inside.
  const fs::path ca_dir = server->data_dir() / "egress-ca";
  const std::string ca_line = sh("sed -n 2p " + (ca_dir / "ca.pem").string());
  const std::string key_line = sh("sed -n 2p " + (ca_dir / "ca.key").string());
  ASSERT_GT(ca_line.size(), 20u);
  ASSERT_GT(key_line.size(), 20u);
  const int system_certificates =
      std::stoi(sh("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt"));
  EXPECT_EQ(out(bash("cd /.sandboxd/trust && grep -cF '" + ca_line.substr(0, ca_line.size() - 1) +
                     "' ca-certificates.crt sandboxd-egress-ca.crt /etc/ssl/certs/ca-certificates.crt; "
                     "grep -c 'BEGIN CERTIFICATE' ca-certificates.crt; "
                     "cmp -s ca-certificates.crt /etc/ssl/certs/ca-certificates.crt && echo same; "
                     "grep -c 'PRIVATE KEY' ca-certificates.crt sandboxd-egress-ca.crt; "
                     "grep -rlF '" +
                     key_line.substr(0, key_line.size() - 1) +
                     "' /.sandboxd /etc /home /tmp /mnt 2>/dev/null | wc -l; "
                     "touch x 2>/dev/null || echo read-only; "
                     "(echo x >> /etc/ssl/certs/ca-certificates.crt) 2>/dev/null || echo read-only")),
            "ca-certificates.crt:1\nsandboxd-egress-ca.crt:1\n/etc/ssl/certs/ca-certificates.crt:1\n" +
                std::to_string(system_certificates + 1) +
                "\nsame\nca-certificates.crt:0\nsandboxd-egress-ca.crt:0\n0\nread-only\nread-only\n");
  server->write_config(config_yaml(""));
  server->reload();
}

}  // namespace sandboxd::testing
