// The little of DNS (RFC 1035) a sandbox's resolver needs answered: one question per
// query, A records for the names the server knows, "no such name" for the rest, so a
// name outside the allowed set fails at once. The queries come from code in a sandbox:
// anything malformed is refused (FORMERR) or dropped, never trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::server {

inline constexpr uint16_t kDnsTypeA = 1;
inline constexpr uint16_t kDnsClassIn = 1;

struct DnsQuestion {
  std::string name;  // lower-case, dotted, no trailing dot
  uint16_t type = 0, klass = 0;
};

// The reply to `query` (a UDP payload), or nullopt when it deserves none (not a query,
// too short to answer). `lookup` gives a name's IPv4 addresses (host order), or nullopt
// when the name does not exist.
template <typename Lookup>
std::optional<std::string> dns_reply(std::string_view query, Lookup&& lookup);

// The pieces dns_reply is made of.
struct DnsParse {
  enum class Outcome { Drop, FormatError, NotImplemented, Question } outcome = Outcome::Drop;
  DnsQuestion question;
  size_t question_end = 0;  // where the question section ends in the query
};
DnsParse parse_dns_query(std::string_view query);
std::string dns_error_reply(std::string_view query, uint8_t rcode);
std::string dns_answer_reply(std::string_view query, const DnsParse& parsed,
                             const std::optional<std::vector<uint32_t>>& addresses);

template <typename Lookup>
std::optional<std::string> dns_reply(std::string_view query, Lookup&& lookup) {
  DnsParse parsed = parse_dns_query(query);
  switch (parsed.outcome) {
    case DnsParse::Outcome::Drop:
      return std::nullopt;
    case DnsParse::Outcome::FormatError:
      return dns_error_reply(query, 1);
    case DnsParse::Outcome::NotImplemented:
      return dns_error_reply(query, 4);
    case DnsParse::Outcome::Question:
      break;
  }
  return dns_answer_reply(query, parsed, lookup(parsed.question.name));
}

}  // namespace sandboxd::server
