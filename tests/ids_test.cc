// The id generator on its own (base/ids.h): every id's shape (clients and tests parse
// them), no repeats, and every character of an alphabet as likely as the others.
#include "base/ids.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace sandboxd {
namespace {

bool only_of(const std::string& text, std::string_view alphabet) {
  return text.find_first_not_of(alphabet) == std::string::npos;
}

constexpr std::string_view kHex = "0123456789abcdef";
constexpr std::string_view kAlnum = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
constexpr std::string_view kBase36 = "0123456789abcdefghijklmnopqrstuvwxyz";

TEST(Ids, HaveTheirLengthAndAlphabet) {
  for (size_t length : {0u, 1u, 7u, 16u, 24u, 63u, 64u, 200u}) {
    auto hex = random_hex(length);
    EXPECT_EQ(hex.size(), length);
    EXPECT_TRUE(only_of(hex, kHex)) << hex;
    auto alnum = random_alnum(length);
    EXPECT_EQ(alnum.size(), length);
    EXPECT_TRUE(only_of(alnum, kAlnum)) << alnum;
    auto base36 = random_base36(length);
    EXPECT_EQ(base36.size(), length);
    EXPECT_TRUE(only_of(base36, kBase36)) << base36;
    auto chosen = random_chars("xyz", length);
    EXPECT_EQ(chosen.size(), length);
    EXPECT_TRUE(only_of(chosen, "xyz")) << chosen;
  }
}

TEST(Ids, RequestIdIsReqAnd24Alphanumerics) {
  auto id = new_request_id();
  ASSERT_EQ(id.size(), 4u + 24u);
  EXPECT_EQ(id.substr(0, 4), "req_");
  EXPECT_TRUE(only_of(id.substr(4), kAlnum)) << id;
}

TEST(Ids, DoNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 20000; ++i) {
    EXPECT_TRUE(seen.insert(random_hex(16)).second);
    EXPECT_TRUE(seen.insert(new_request_id()).second);
  }
}

// With a plain modulo of a random byte, the first 256 % 62 = 8 characters of [0-9A-Za-z]
// would come 5/4 as often as the others; drawn again, each comes as often as the rest.
TEST(Ids, EveryCharacterIsEquallyLikely) {
  std::map<char, int> counts;
  constexpr int kPerCharacter = 4000;
  std::string drawn = random_alnum(kAlnum.size() * kPerCharacter);
  for (char c : drawn) ++counts[c];
  ASSERT_EQ(counts.size(), kAlnum.size());
  // The standard deviation of each count is about 63: 8% is more than 5 of them, and
  // the modulo's bias (21% above the mean) is far outside.
  for (auto [c, n] : counts) {
    EXPECT_GT(n, kPerCharacter * 92 / 100) << c;
    EXPECT_LT(n, kPerCharacter * 108 / 100) << c;
  }
}

TEST(Ids, RandomBelowStaysBelowAndReachesEveryValue) {
  std::map<uint64_t, int> counts;
  for (int i = 0; i < 7000; ++i) {
    auto n = random_below(7);
    ASSERT_LT(n, 7u);
    ++counts[n];
  }
  EXPECT_EQ(counts.size(), 7u);
  EXPECT_EQ(random_below(1), 0u);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(random_below(100000), 100000u);
}

}  // namespace
}  // namespace sandboxd
