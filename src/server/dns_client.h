// Asks DNS servers for a name's IPv4 addresses: what the egress path uses to resolve an
// allowed name with the operator's resolvers (network.egress.resolvers) rather than the
// host's stub resolver, so the answer comes from the servers the policy names. UDP, one
// question per query, a random id checked on the reply (a reply for another query, or a
// spoofed one without the id, is ignored), each server tried in turn.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::server {

namespace asio = boost::asio;

// The query for `name`'s A records, with `id`.
std::string dns_a_query(uint16_t id, std::string_view name);

struct DnsLookup {
  std::vector<uint32_t> addresses;  // host order; empty with `error` set when none
  std::string error;                // "no such name", "timed out asking 10.0.0.2:53", ...
};

// The A records of a reply to query `id`; nullopt when it is not that reply (a
// different id, not a response, too short to be one).
std::optional<DnsLookup> parse_dns_a_reply(std::string_view reply, uint16_t id);

// `name`'s addresses from the first of `servers` ("a.b.c.d:port") that answers within
// `timeout`.
asio::awaitable<DnsLookup> resolve_ipv4(asio::any_io_executor executor,
                                        const std::vector<std::string>& servers, std::string name,
                                        std::chrono::milliseconds timeout);

// The IPv4 nameservers of a resolv.conf ("a.b.c.d:53" each).
std::vector<std::string> resolv_conf_nameservers(const std::string& path = "/etc/resolv.conf");

}  // namespace sandboxd::server
