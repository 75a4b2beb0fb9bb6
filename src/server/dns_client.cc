#include "server/dns_client.h"

#include <openssl/rand.h>

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fstream>
#include <sstream>

#include "server/dns_message.h"

namespace sandboxd::server {
namespace {

constexpr size_t kHeader = 12;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

uint16_t read16(std::string_view data, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(data[at]) << 8 | static_cast<uint8_t>(data[at + 1]));
}
void put16(std::string& out, uint16_t value) {
  out.push_back(static_cast<char>(value >> 8));
  out.push_back(static_cast<char>(value & 0xff));
}

// Past a (possibly compressed) name starting at `at`; npos when it runs off the end.
size_t skip_name(std::string_view data, size_t at) {
  for (int labels = 0; labels < 128; ++labels) {
    if (at >= data.size()) return std::string_view::npos;
    const uint8_t length = static_cast<uint8_t>(data[at]);
    if (length == 0) return at + 1;
    if ((length & 0xc0) == 0xc0) return at + 2 <= data.size() ? at + 2 : std::string_view::npos;
    if (length > 63) return std::string_view::npos;
    at += 1 + length;
  }
  return std::string_view::npos;
}

uint16_t random_id() {
  uint16_t id = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&id), sizeof id);
  return id;
}

}  // namespace

std::string dns_a_query(uint16_t id, std::string_view name) {
  std::string out;
  put16(out, id);
  put16(out, 0x0100);  // a standard query, recursion desired
  put16(out, 1);
  put16(out, 0);
  put16(out, 0);
  put16(out, 0);
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    if (!label.empty()) {
      out.push_back(static_cast<char>(label.size()));
      out.append(label);
    }
    start = dot + 1;
  }
  out.push_back('\0');
  put16(out, kDnsTypeA);
  put16(out, kDnsClassIn);
  return out;
}

std::optional<DnsLookup> parse_dns_a_reply(std::string_view reply, uint16_t id) {
  if (reply.size() < kHeader || read16(reply, 0) != id) return std::nullopt;
  const uint8_t flags = static_cast<uint8_t>(reply[2]);
  if (!(flags & 0x80)) return std::nullopt;  // not a response
  DnsLookup lookup;
  const uint8_t rcode = static_cast<uint8_t>(reply[3]) & 0x0f;
  if (rcode == 3) {
    lookup.error = "no such name";
    return lookup;
  }
  if (rcode != 0) {
    lookup.error = "the DNS server answered with error code " + std::to_string(rcode);
    return lookup;
  }
  const uint16_t questions = read16(reply, 4), answers = read16(reply, 6);
  size_t at = kHeader;
  for (uint16_t i = 0; i < questions; ++i) {
    at = skip_name(reply, at);
    if (at == std::string_view::npos || at + 4 > reply.size()) return std::nullopt;
    at += 4;
  }
  for (uint16_t i = 0; i < answers; ++i) {
    at = skip_name(reply, at);
    if (at == std::string_view::npos || at + 10 > reply.size()) break;
    const uint16_t type = read16(reply, at), klass = read16(reply, at + 2), length = read16(reply, at + 8);
    at += 10;
    if (at + length > reply.size()) break;
    if (type == kDnsTypeA && klass == kDnsClassIn && length == 4)
      lookup.addresses.push_back(static_cast<uint32_t>(read16(reply, at)) << 16 | read16(reply, at + 2));
    at += length;
  }
  if (lookup.addresses.empty()) lookup.error = "no IPv4 address";
  return lookup;
}

asio::awaitable<DnsLookup> resolve_ipv4(asio::any_io_executor executor,
                                        const std::vector<std::string>& servers, std::string name,
                                        std::chrono::milliseconds timeout) {
  using namespace asio::experimental::awaitable_operators;
  DnsLookup last{{}, "no DNS server to ask (network.egress.resolvers, or the host's resolv.conf)"};
  for (const auto& server : servers) {
    const auto colon = server.rfind(':');
    boost::system::error_code ec;
    const auto address = asio::ip::make_address_v4(server.substr(0, colon), ec);
    if (ec) continue;
    const asio::ip::udp::endpoint to(address, static_cast<uint16_t>(std::stoi(server.substr(colon + 1))));
    asio::ip::udp::socket socket(executor);
    socket.open(asio::ip::udp::v4(), ec);
    if (ec) {
      last.error = "opening a UDP socket: " + ec.message();
      continue;
    }
    socket.connect(to, ec);  // replies from anywhere else are not even received
    const uint16_t id = random_id();
    const std::string query = dns_a_query(id, name);
    if (!ec) co_await socket.async_send(asio::buffer(query), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      last.error = "asking " + server + ": " + ec.message();
      continue;
    }
    asio::steady_timer deadline(executor, timeout);
    std::optional<DnsLookup> answer;
    auto receive = [&]() -> asio::awaitable<void> {
      std::array<char, 1500> buffer;
      for (;;) {
        auto [error, size] = co_await socket.async_receive(asio::buffer(buffer), use_tuple);
        if (error) co_return;
        answer = parse_dns_a_reply(std::string_view(buffer.data(), size), id);
        if (answer) co_return;
      }
    };
    co_await (receive() || deadline.async_wait(use_tuple));
    if (answer) co_return *answer;
    last.error = "no answer from " + server + " within " + std::to_string(timeout.count()) + " ms";
  }
  co_return last;
}

std::vector<std::string> resolv_conf_nameservers(const std::string& path) {
  std::vector<std::string> servers;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream words(line);
    std::string keyword, address;
    if (!(words >> keyword >> address) || keyword != "nameserver") continue;
    boost::system::error_code ec;
    asio::ip::make_address_v4(address, ec);
    if (!ec) servers.push_back(address + ":53");
  }
  return servers;
}

}  // namespace sandboxd::server
