#include "server/dns_message.h"

#include <algorithm>
#include <cctype>

namespace sandboxd::server {
namespace {

constexpr size_t kHeader = 12;
constexpr uint32_t kTtlSeconds = 5;  // the set changes live; resolvers should ask again soon
constexpr size_t kMaxAnswers = 16;   // stays within a 512-byte UDP reply

uint16_t read16(std::string_view data, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(data[at]) << 8 | static_cast<uint8_t>(data[at + 1]));
}
void put16(std::string& out, uint16_t value) {
  out.push_back(static_cast<char>(value >> 8));
  out.push_back(static_cast<char>(value & 0xff));
}
void put32(std::string& out, uint32_t value) {
  put16(out, static_cast<uint16_t>(value >> 16));
  put16(out, static_cast<uint16_t>(value & 0xffff));
}

// The reply's header: the query's id, opcode and RD, QR and AA set, no recursion.
std::string reply_header(std::string_view query, uint8_t rcode, uint16_t questions, uint16_t answers) {
  std::string out;
  out.append(query.substr(0, 2));
  const uint8_t flags = static_cast<uint8_t>(query[2]);
  out.push_back(static_cast<char>(0x80 | (flags & 0x78) | 0x04 | (flags & 0x01)));
  out.push_back(static_cast<char>(rcode & 0x0f));
  put16(out, questions);
  put16(out, answers);
  put16(out, 0);
  put16(out, 0);
  return out;
}

}  // namespace

DnsParse parse_dns_query(std::string_view query) {
  DnsParse parsed;
  if (query.size() < kHeader) return parsed;                 // nothing to answer to
  if (static_cast<uint8_t>(query[2]) & 0x80) return parsed;  // a response: never answer one
  parsed.outcome = DnsParse::Outcome::FormatError;
  const uint8_t opcode = (static_cast<uint8_t>(query[2]) >> 3) & 0x0f;
  if (opcode != 0) {
    parsed.outcome = DnsParse::Outcome::NotImplemented;
    return parsed;
  }
  if (read16(query, 4) != 1) return parsed;  // exactly one question, as every resolver sends
  size_t at = kHeader;
  std::string name;
  for (;;) {
    if (at >= query.size()) return parsed;
    const uint8_t length = static_cast<uint8_t>(query[at++]);
    if (length == 0) break;
    if (length > 63 || at + length > query.size()) return parsed;  // a pointer or a cut label
    if (!name.empty()) name.push_back('.');
    for (size_t i = 0; i < length; ++i) {
      const char c = query[at + i];
      if (c == '.' || c == '\0') return parsed;
      name.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    at += length;
    if (name.size() > 253) return parsed;
  }
  if (at + 4 > query.size()) return parsed;
  parsed.question.name = std::move(name);
  parsed.question.type = read16(query, at);
  parsed.question.klass = read16(query, at + 2);
  parsed.question_end = at + 4;
  parsed.outcome = DnsParse::Outcome::Question;
  return parsed;
}

std::string dns_error_reply(std::string_view query, uint8_t rcode) {
  return reply_header(query, rcode, 0, 0);
}

std::string dns_answer_reply(std::string_view query, const DnsParse& parsed,
                             const std::optional<std::vector<uint32_t>>& addresses) {
  const bool exists = addresses && !addresses->empty();
  const bool want_a = parsed.question.type == kDnsTypeA && parsed.question.klass == kDnsClassIn;
  const size_t answers = exists && want_a ? std::min(addresses->size(), kMaxAnswers) : 0;
  // A known name without records of the asked type (AAAA, say) is NOERROR with no
  // answer, so the resolver does not give up on its A question.
  std::string out = reply_header(query, exists ? 0 : 3, 1, static_cast<uint16_t>(answers));
  out.append(query.substr(kHeader, parsed.question_end - kHeader));
  for (size_t i = 0; i < answers; ++i) {
    put16(out, 0xc000 | kHeader);  // the name: a pointer to the question's
    put16(out, kDnsTypeA);
    put16(out, kDnsClassIn);
    put32(out, kTtlSeconds);
    put16(out, 4);
    put32(out, (*addresses)[i]);
  }
  return out;
}

}  // namespace sandboxd::server
