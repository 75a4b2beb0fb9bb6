// The egress policy's parsing and matching (ops/egress_policy.h), and what the egress
// path reads before it connects out: a real ClientHello's server name (made by OpenSSL's
// client), an HTTP request's Host, and the DNS client's query and reply (answered by
// the sandbox resolver's own reply builder); the header rules and the CA that their TLS
// interception signs with. No server, no root.

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "ops/config.h"
#include "ops/egress_policy.h"
#include "ops/sandbox_egress.h"
#include "runtime/trust_bundle.h"
#include "server/destination_peek.h"
#include "server/dns_client.h"
#include "server/dns_message.h"
#include "server/egress_interception.h"

using namespace sandboxd;

namespace {

ops::EgressRule rule(const std::string& text) {
  std::string error;
  auto parsed = ops::parse_egress_rule(text, &error);
  EXPECT_TRUE(parsed) << text << ": " << error;
  return parsed.value_or(ops::EgressRule{});
}

std::string refusal(const std::string& text) {
  std::string error;
  EXPECT_FALSE(ops::parse_egress_rule(text, &error)) << text;
  return error;
}

ops::EgressPolicy policy(std::vector<std::string> allow, std::vector<std::string> deny = {}) {
  std::vector<ops::EgressRule> a, d;
  for (const auto& text : allow) a.push_back(rule(text));
  for (const auto& text : deny) d.push_back(rule(text));
  return ops::EgressPolicy(a, d);
}

uint32_t ip(const char* text) { return *ops::parse_ipv4(text); }

// A sandbox's own options against the operator's allow entries `ceiling`.
std::optional<ops::SandboxEgress> own(std::vector<std::string> allow_out, std::vector<std::string> deny_out,
                                      std::optional<bool> internet, std::vector<std::string> ceiling,
                                      std::string* error) {
  std::vector<ops::EgressRule> allow;
  for (const auto& text : ceiling) allow.push_back(rule(text));
  return ops::parse_sandbox_egress(allow_out, deny_out, internet, allow, {}, error);
}

// The first flight of a TLS client that names `server_name` (none when empty).
std::string client_hello(const std::string& server_name) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  if (!server_name.empty()) SSL_set_tlsext_host_name(ssl, server_name.c_str());
  SSL_connect(ssl);  // wants to read the server's answer: the ClientHello is in `out`
  char* data = nullptr;
  long size = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<size_t>(size));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return hello;
}

}  // namespace

TEST(EgressPolicy, EntriesAreNamesWildcardsAndCidrsWithOptionalPorts) {
  EXPECT_EQ(rule("PyPI.Internal.").name, "pypi.internal");
  EXPECT_EQ(rule("*.example.com:443").kind, ops::EgressRule::Kind::Suffix);
  EXPECT_EQ(rule("*.example.com:443").port, 443);
  EXPECT_EQ(rule("10.1.0.0/16:5432").kind, ops::EgressRule::Kind::Network);
  EXPECT_EQ(rule("192.0.2.7").network.prefix, 32);
  EXPECT_NE(refusal("example.com:0").find("1 to 65535"), std::string::npos);
  EXPECT_NE(refusal("example.com:http").find("1 to 65535"), std::string::npos);
  EXPECT_NE(refusal("10.0.0.0/33").find("CIDR"), std::string::npos);
  EXPECT_NE(refusal("*.").find("wildcard"), std::string::npos);
  EXPECT_NE(refusal("a.*.example.com").find("host name"), std::string::npos);
  EXPECT_NE(refusal("exa mple.com").find("host name"), std::string::npos);
  EXPECT_NE(refusal(":443").find("must name"), std::string::npos);
}

TEST(EgressPolicy, NothingIsAllowedByDefault) {
  ops::EgressPolicy none;
  EXPECT_TRUE(none.closed());
  EXPECT_FALSE(none.allows_name("example.com", 443));
  EXPECT_FALSE(none.allows_address(ip("10.0.0.1"), 22));
}

TEST(EgressPolicy, AWildcardMatchesSubdomainsButNotTheApex) {
  auto p = policy({"*.example.com"});
  EXPECT_TRUE(p.allows_name("api.example.com", 443));
  EXPECT_TRUE(p.allows_name("a.b.example.com", 80));
  EXPECT_FALSE(p.allows_name("example.com", 443));
  EXPECT_FALSE(p.allows_name("badexample.com", 443));
  EXPECT_FALSE(p.allows_name("example.com.evil.net", 443));
}

TEST(EgressPolicy, PortsNarrowAnEntryAndDenyWins) {
  auto p = policy({"git.example.com:22", "*.example.com:443", "pypi.internal"},
                  {"secret.example.com", "pypi.internal:80"});
  EXPECT_TRUE(p.allows_name("git.example.com", 22));
  EXPECT_FALSE(p.allows_name("git.example.com", 80));
  EXPECT_TRUE(p.allows_name("git.example.com", 443));
  EXPECT_FALSE(p.allows_name("secret.example.com", 443));
  EXPECT_FALSE(p.allows_name_on_any_port("secret.example.com"));
  EXPECT_TRUE(p.allows_name("pypi.internal", 443));
  EXPECT_FALSE(p.allows_name("pypi.internal", 80));
  EXPECT_TRUE(p.allows_name_on_any_port("pypi.internal"));
  EXPECT_EQ(p.named_ports("git.example.com"), std::vector<uint16_t>({22, 443}));
  EXPECT_NE(p.why_refused("secret.example.com", 443).find("'secret.example.com'"), std::string::npos);
  EXPECT_NE(p.why_refused("other.net", 443).find("not allowed"), std::string::npos);
}

TEST(EgressPolicy, CidrsAllowAddressesAndDenyCidrsRemoveResolvedOnes) {
  auto p = policy({"10.20.0.0/16:5432", "*.corp.example"}, {"10.20.5.0/24", "169.254.169.254"});
  EXPECT_TRUE(p.allows_address(ip("10.20.1.1"), 5432));
  EXPECT_FALSE(p.allows_address(ip("10.20.1.1"), 5433));
  EXPECT_FALSE(p.allows_address(ip("10.20.5.9"), 5432));
  EXPECT_TRUE(p.denies_address(ip("169.254.169.254"), 80));
  EXPECT_FALSE(p.denies_address(ip("10.21.0.1"), 80));
  ASSERT_EQ(p.network_rules().size(), 1u);
}

TEST(EgressPolicy, TheConfigurationRefusesABadEntryWithItsPath) {
  auto config = ops::parse_config(
      "network:\n  egress:\n    allow: [pypi.internal, '*.example.com:443']\n"
      "    deny: [10.0.0.0/8]\n    resolvers: ['10.0.0.2', '10.0.0.3:5353']\n");
  EXPECT_EQ(config.egress_allow.size(), 2u);
  EXPECT_EQ(config.egress_deny.size(), 1u);
  EXPECT_EQ(config.egress_resolvers, std::vector<std::string>({"10.0.0.2:53", "10.0.0.3:5353"}));
  EXPECT_FALSE(config.egress_policy().closed());
  try {
    ops::parse_config("network:\n  egress:\n    allow: [good.example, 'bad example']\n");
    ADD_FAILURE() << "accepted";
  } catch (const ops::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("network.egress.allow[1]: 'bad example'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ops::parse_config("network:\n  egress:\n    resolvers: [dns.example]\n"), ops::ConfigError);
}

// A sandbox's own options (E2B's network): within the operator's allow entries only.
TEST(SandboxEgress, ARequestMayNarrowTheOperatorsPolicyButNeverWidenIt) {
  const std::vector<std::string> ceiling{"pypi.internal", "*.example.com", "git.example.com:22",
                                         "10.1.0.0/16:5432"};
  std::string error;
  EXPECT_TRUE(own({"pypi.internal", "*.example.com", "*.api.example.com", "a.example.com", "git.example.com",
                   "10.1.2.0/24:5432", "10.1.2.3:5432"},
                  {"0.0.0.0/0"}, false, ceiling, &error))
      << error;
  for (const char* wider :
       {"other.internal", "example.com", "*.com", "10.0.0.0/8:5432", "10.1.2.3", "0.0.0.0/0"}) {
    EXPECT_FALSE(own({wider}, {}, std::nullopt, ceiling, &error)) << wider;
    EXPECT_NE(error.find("'" + std::string(wider) + "' is not allowed by this server's egress policy"),
              std::string::npos)
        << error;
  }
  // Nothing allowed by the operator: every allowOut entry is wider.
  EXPECT_FALSE(own({"pypi.internal"}, {}, std::nullopt, {}, &error));
  // E2B's denyOut takes addresses and CIDRs, not names; malformed entries are named.
  EXPECT_FALSE(own({}, {"pypi.internal"}, std::nullopt, ceiling, &error));
  EXPECT_NE(error.find("domain names are not supported for deny rules"), std::string::npos) << error;
  EXPECT_FALSE(own({"bad name"}, {}, std::nullopt, ceiling, &error));
  EXPECT_NE(error.find("'network.allowOut' entry 'bad name'"), std::string::npos) << error;
  std::vector<std::string> many(ops::kMaxSandboxEgressEntries + 1, "10.9.9.9");
  EXPECT_FALSE(own({}, many, std::nullopt, ceiling, &error));
  EXPECT_NE(error.find("at most 64 entries"), std::string::npos) << error;
}

TEST(SandboxEgress, AllowOutWinsOverDenyOutAndAllowInternetAccessFalseDeniesTheRest) {
  const std::vector<std::string> ceiling{"*.example.com", "10.0.0.0/8"};
  std::string error;
  // allowOut alone narrows nothing (E2B: what no denyOut entry covers stays allowed).
  auto alone = own({"a.example.com"}, {}, std::nullopt, ceiling, &error);
  ASSERT_TRUE(alone) << error;
  EXPECT_TRUE(alone->may_resolve("b.example.com"));
  EXPECT_TRUE(alone->allows_address(ip("10.2.3.4"), 443));
  // "Only these": allowOut and denyOut 0.0.0.0/0, or allowInternetAccess false.
  for (auto only : {own({"a.example.com", "10.1.0.0/16"}, {"0.0.0.0/0"}, std::nullopt, ceiling, &error),
                    own({"a.example.com", "10.1.0.0/16"}, {}, false, ceiling, &error)}) {
    ASSERT_TRUE(only) << error;
    EXPECT_TRUE(only->denies_everything());
    EXPECT_TRUE(only->lists_name("a.example.com", 443));
    EXPECT_TRUE(only->may_resolve("a.example.com"));
    EXPECT_FALSE(only->may_resolve("b.example.com"));
    EXPECT_TRUE(only->allows_address(ip("10.1.2.3"), 5432));
    EXPECT_FALSE(only->allows_address(ip("10.2.3.4"), 5432));
  }
  // A narrower denyOut keeps the rest.
  auto some = own({}, {"10.2.0.0/16"}, true, ceiling, &error);
  ASSERT_TRUE(some) << error;
  EXPECT_FALSE(some->denies_everything());
  EXPECT_FALSE(some->allows_address(ip("10.2.3.4"), 80));
  EXPECT_TRUE(some->allows_address(ip("10.3.3.4"), 80));
}

TEST(DestinationPeek, TheServerNameOfARealClientHello) {
  const std::string hello = client_hello("Files.Example.COM");
  ASSERT_GT(hello.size(), 50u);
  auto found = server::tls_server_name(hello);
  EXPECT_EQ(found.state, server::PeekedDestination::State::Found);
  EXPECT_EQ(found.host, "files.example.com");
  // Cut anywhere: more is needed, never a wrong answer.
  for (size_t cut : {size_t{0}, size_t{3}, size_t{5}, hello.size() / 2, hello.size() - 1})
    EXPECT_EQ(server::tls_server_name(hello.substr(0, cut)).state, server::PeekedDestination::State::NeedMore)
        << cut;
  EXPECT_EQ(server::tls_server_name(client_hello("")).state, server::PeekedDestination::State::None);
  EXPECT_EQ(server::tls_server_name("GET / HTTP/1.1\r\n").state, server::PeekedDestination::State::Invalid);
  // A length that points past what the record holds is refused, not followed.
  std::string broken = hello;
  broken[5 + 1] = '\x7f';
  EXPECT_EQ(server::tls_server_name(broken).state, server::PeekedDestination::State::Invalid);
}

TEST(DestinationPeek, TheHostOfAnHttpRequest) {
  auto found =
      server::http_host("GET /simple/ HTTP/1.1\r\nUser-Agent: pip\r\nhost: PyPI.internal:80\r\n\r\n");
  EXPECT_EQ(found.state, server::PeekedDestination::State::Found);
  EXPECT_EQ(found.host, "pypi.internal");
  EXPECT_EQ(server::http_host("GET http://other.example/x HTTP/1.1\r\nHost: pypi.internal\r\n\r\n").host,
            "other.example");
  EXPECT_EQ(server::http_host("GET / HTTP/1.1\r\nHost: a\r\n").state,
            server::PeekedDestination::State::NeedMore);
  EXPECT_EQ(server::http_host("GET / HTTP/1.0\r\n\r\n").state, server::PeekedDestination::State::None);
  EXPECT_EQ(server::http_host("GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n").state,
            server::PeekedDestination::State::Invalid);
  EXPECT_EQ(server::http_host("\x16\x03\x01").state, server::PeekedDestination::State::Invalid);
}

TEST(DestinationPeek, AProxyRequestNamesItsDestination) {
  using State = server::ProxyRequest::State;
  auto connect =
      server::proxy_request("CONNECT Allowed.Test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\nextra");
  EXPECT_EQ(connect.state, State::Connect);
  EXPECT_EQ(connect.host, "allowed.test");
  EXPECT_EQ(connect.port, 443);
  EXPECT_EQ(connect.head_size,
            std::string("CONNECT Allowed.Test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n").size());
  auto get = server::proxy_request(
      "GET http://allowed.test:8080/a?b=1#frag HTTP/1.1\r\nHost: allowed.test:8080\r\nProxy-Connection: "
      "keep-alive\r\n"
      "Proxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n");
  EXPECT_EQ(get.state, State::Forward);
  EXPECT_EQ(get.host, "allowed.test");
  EXPECT_EQ(get.port, 8080);
  EXPECT_EQ(get.forward_head, "GET /a?b=1 HTTP/1.1\r\nHost: allowed.test:8080\r\nAccept: */*\r\n\r\n");
  auto bare = server::proxy_request("GET http://10.1.2.3 HTTP/1.0\r\n\r\n");
  EXPECT_EQ(bare.state, State::Forward);
  EXPECT_EQ(bare.host, "10.1.2.3");
  EXPECT_EQ(bare.port, 80);
  EXPECT_EQ(bare.forward_head, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(server::proxy_request("CONNECT allowed.test:443 HTTP/1.1\r\n").state, State::NeedMore);
  // Refused, each with its reason: no port on CONNECT, an origin-form or https:// target,
  // a Host naming another host, credentials in the URL, not HTTP, a head past the bound.
  for (const char* bad :
       {"CONNECT allowed.test HTTP/1.1\r\n\r\n", "CONNECT allowed.test:0 HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "GET https://allowed.test/ HTTP/1.1\r\n\r\n",
        "GET http://allowed.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
        "GET http://user@allowed.test/ HTTP/1.1\r\n\r\n", "\x16\x03\x01 hello",
        "GET http://allowed.test/ FTP/1.0\r\n\r\n"}) {
    auto request = server::proxy_request(bad);
    EXPECT_EQ(request.state, State::Invalid) << bad;
    EXPECT_FALSE(request.error.empty()) << bad;
  }
  EXPECT_EQ(server::proxy_request("GET http://allowed.test/" + std::string(server::kMaxPeekBytes, 'a')).state,
            State::Invalid);
}

TEST(DnsClient, AQueryAndTheResolversReplyToIt) {
  const std::string query = server::dns_a_query(0x1234, "pypi.internal");
  auto parsed = server::parse_dns_query(query);
  ASSERT_EQ(parsed.outcome, server::DnsParse::Outcome::Question);
  EXPECT_EQ(parsed.question.name, "pypi.internal");
  EXPECT_EQ(parsed.question.type, server::kDnsTypeA);
  auto reply = server::dns_answer_reply(query, parsed, std::vector<uint32_t>{ip("10.0.0.7"), ip("10.0.0.8")});
  auto answer = server::parse_dns_a_reply(reply, 0x1234);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->addresses, std::vector<uint32_t>({ip("10.0.0.7"), ip("10.0.0.8")}));
  EXPECT_FALSE(server::parse_dns_a_reply(reply, 0x1235)) << "another query's reply is not this one's";
  EXPECT_FALSE(server::parse_dns_a_reply(query, 0x1234)) << "a query is not a reply";
  auto missing = server::parse_dns_a_reply(server::dns_answer_reply(query, parsed, std::nullopt), 0x1234);
  ASSERT_TRUE(missing);
  EXPECT_TRUE(missing->addresses.empty());
  EXPECT_EQ(missing->error, "no such name");
  // Cut short: no addresses read past the end.
  auto cut = server::parse_dns_a_reply(reply.substr(0, reply.size() - 3), 0x1234);
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->addresses.size(), 1u);
}

TEST(HeaderRules, AHostOrAWildcardWithHeadersThatCannotReframeTheRequest) {
  std::string error;
  auto exact = ops::parse_header_rule("API.Vendor.test.", {{"Authorization", "Bearer s"}}, &error);
  ASSERT_TRUE(exact) << error;
  EXPECT_EQ(exact->host, "api.vendor.test");
  EXPECT_FALSE(exact->wildcard);
  auto wildcard = ops::parse_header_rule("*.vendor.test", {{"X-Key", "k"}}, &error);
  ASSERT_TRUE(wildcard) << error;
  EXPECT_EQ(wildcard->host, ".vendor.test");
  EXPECT_TRUE(wildcard->wildcard);
  for (const char* bad : {"*", "*.", "a b", ""})
    EXPECT_FALSE(ops::parse_header_rule(bad, {{"X-Key", "k"}}, &error)) << bad;
  // An address or a CIDR: a rule applies by the TLS server name, which is never one.
  for (const char* address :
       {"10.0.0.1", "10.0.0.0/8", "*.10.0.0.1", "::1", "[2001:db8::1]", "192.0.2.7:443"}) {
    error.clear();
    EXPECT_FALSE(ops::parse_header_rule(address, {{"X-Key", "k"}}, &error)) << address;
    EXPECT_NE(error.find("is an IP address or CIDR: header rules apply to HTTPS by host name"),
              std::string::npos)
        << address << ": " << error;
  }
  EXPECT_FALSE(ops::parse_header_rule("a.test", {{"Host", "elsewhere.test"}}, &error));
  EXPECT_NE(error.find("may not set 'Host'"), std::string::npos) << error;
  EXPECT_FALSE(ops::parse_header_rule("a.test", {{"Transfer-Encoding", "chunked"}}, &error));
  EXPECT_FALSE(ops::parse_header_rule("a.test", {{"Bad Name", "v"}}, &error));
  EXPECT_FALSE(ops::parse_header_rule("a.test", {{"X-Key", "v\r\nHost: elsewhere.test"}}, &error));
  EXPECT_NE(error.find("control character"), std::string::npos) << error;
}

TEST(HeaderRules, AnExactRuleWinsThenTheLongestWildcardAndTheApexIsNotASubdomain) {
  std::string error;
  std::vector<ops::HeaderRule> rules;
  for (const char* pattern : {"*.test", "*.vendor.test", "api.vendor.test"})
    rules.push_back(*ops::parse_header_rule(pattern, {{"X-Rule", pattern}}, &error));
  auto which = [&](const char* host) {
    const auto* rule = ops::match_header_rule(rules, host);
    return rule ? rule->source : std::string("none");
  };
  EXPECT_EQ(which("api.vendor.test"), "api.vendor.test");
  EXPECT_EQ(which("eu.api.vendor.test"), "*.vendor.test");
  EXPECT_EQ(which("other.test"), "*.test");
  EXPECT_EQ(which("vendor.test"), "*.test");
  EXPECT_EQ(which("test"), "none");
  EXPECT_EQ(which("example.com"), "none");
}

TEST(HeaderRules, TheConfigurationTakesRulesAndRefusesABadOneWithItsPath) {
  auto config = ops::parse_config(
      "network: { egress: { allow: [api.vendor.test], rules: [ { host: api.vendor.test, headers: { "
      "Authorization: 'Bearer s3cret' } } ], upstreamCaFile: /etc/ca.pem } }\n");
  ASSERT_EQ(config.egress_header_rules.size(), 1u);
  EXPECT_EQ(config.egress_header_rules[0].headers[0].second, "Bearer s3cret");
  EXPECT_EQ(config.egress_upstream_ca_file, "/etc/ca.pem");
  try {
    ops::parse_config("network: { egress: { rules: [ { host: '*', headers: { X-Key: v } } ] } }\n");
    ADD_FAILURE() << "a bare * was taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("network.egress.rules[0]: must be a host name"), std::string::npos)
        << e.what();
  }
  try {
    ops::parse_config("network: { egress: { rules: [ { host: 10.1.0.0/16, headers: { X-Key: v } } ] } }\n");
    ADD_FAILURE() << "a CIDR was taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("network.egress.rules[0]: is an IP address or CIDR"),
              std::string::npos)
        << e.what();
  }
}

// The installation's CA: made once (the key 0600 in a 0700 folder), the same one loaded
// after; each leaf verifies against it for its own name only.
TEST(InterceptionCa, IsMadeOnceAndSignsALeafPerHost) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sandboxd-ca-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto ca = server::InterceptionCa::load_or_create((dir / "egress-ca").string());
  struct stat st {};
  ASSERT_EQ(stat((dir / "egress-ca").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((dir / "egress-ca" / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(server::InterceptionCa::load_or_create((dir / "egress-ca").string())->certificate_pem(),
            ca->certificate_pem());

  BIO* bio = BIO_new_mem_buf(ca->certificate_pem().data(), static_cast<int>(ca->certificate_pem().size()));
  X509* root = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(root, nullptr);
  auto context = ca->server_context("api.vendor.test");
  EXPECT_EQ(context, ca->server_context("api.vendor.test")) << "kept, not made again";
  X509* leaf = SSL_CTX_get0_certificate(context->native_handle());
  ASSERT_NE(leaf, nullptr);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, root);
  X509_STORE_CTX* verify = X509_STORE_CTX_new();
  X509_STORE_CTX_init(verify, store, leaf, nullptr);
  EXPECT_EQ(X509_verify_cert(verify), 1) << X509_verify_cert_error_string(X509_STORE_CTX_get_error(verify));
  X509_STORE_CTX_free(verify);
  X509_STORE_free(store);
  EXPECT_EQ(X509_check_host(leaf, "api.vendor.test", 0, 0, nullptr), 1);
  EXPECT_NE(X509_check_host(leaf, "other.test", 0, 0, nullptr), 1);
  X509_free(root);

  // A key without its certificate is an error, never silently replaced.
  fs::remove(dir / "egress-ca" / "ca.pem");
  EXPECT_THROW(server::InterceptionCa::load_or_create((dir / "egress-ca").string()), std::runtime_error);
  fs::remove_all(dir);
}

// The folder every sandbox trusts (runtime/trust_bundle.h): the system's certificates and
// the CA's, never anything else of the system's file; a system bundle reached through a
// link is not read (an image's link could lead to any file of the host).
TEST(TrustFolder, HoldsTheSystemsCertificatesAndTheCaAndNothingElse) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sandboxd-trust-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "image" / "etc" / "ssl" / "certs");
  auto ca = server::InterceptionCa::load_or_create((dir / "egress-ca").string());
  const std::string system_cert = "-----BEGIN CERTIFICATE-----\nU1lTVEVN\n-----END CERTIFICATE-----";
  std::ofstream(dir / "image" / "etc" / "ssl" / "certs" / "ca-certificates.crt")
      << "# a comment\n"
      << system_cert << "\n-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n";
  auto read = [](const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  runtime::write_trust_folder((dir / "trust").string(), (dir / "image").string(), ca->certificate_pem());
  const std::string bundle = read(dir / "trust" / runtime::kTrustBundleName);
  EXPECT_EQ(bundle, system_cert + "\n" + ca->certificate_pem());
  EXPECT_EQ(read(dir / "trust" / runtime::kTrustCaName), ca->certificate_pem());
  EXPECT_EQ(bundle.find("PRIVATE KEY"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(stat((dir / "trust").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(stat((dir / "trust" / runtime::kTrustBundleName).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_TRUE(runtime::plain_file_beneath((dir / "image").string(), runtime::kSystemBundle));

  // The image's bundle a link to a file outside it: not read, not a place to bind over.
  fs::remove(dir / "image" / "etc" / "ssl" / "certs" / "ca-certificates.crt");
  std::ofstream(dir / "outside.pem") << system_cert << "\n";
  fs::create_symlink(dir / "outside.pem", dir / "image" / "etc" / "ssl" / "certs" / "ca-certificates.crt");
  EXPECT_FALSE(runtime::plain_file_beneath((dir / "image").string(), runtime::kSystemBundle));
  runtime::write_trust_folder((dir / "trust").string(), (dir / "image").string(), ca->certificate_pem());
  EXPECT_EQ(read(dir / "trust" / runtime::kTrustBundleName), ca->certificate_pem());
  // Likewise a link on the way to it.
  fs::remove_all(dir / "image" / "etc" / "ssl");
  fs::create_directories(dir / "elsewhere" / "certs");
  std::ofstream(dir / "elsewhere" / "certs" / "ca-certificates.crt") << system_cert << "\n";
  fs::create_symlink(dir / "elsewhere", dir / "image" / "etc" / "ssl");
  EXPECT_FALSE(runtime::plain_file_beneath((dir / "image").string(), runtime::kSystemBundle));
  // A CA without a certificate is an error.
  EXPECT_THROW(runtime::write_trust_folder((dir / "trust").string(), (dir / "image").string(), "not a pem"),
               std::runtime_error);
  fs::remove_all(dir);
}
