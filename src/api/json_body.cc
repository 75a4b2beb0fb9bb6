#include "api/json_body.h"

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include <optional>

#include "base/blocking.h"

namespace sandboxd::api {
namespace {

namespace json = boost::json;

constexpr std::string_view kNotJson = "The request body is not valid JSON: ";

// One owner's bytes of parsed JSON held now.
struct Account {
  std::atomic<size_t> bytes{0};
};

// The accounts, by owner, and the sum of all. An account lives while a parse or a
// parsed value charges it; the map keeps only a weak reference.
class ParseBudget {
 public:
  std::shared_ptr<Account> account(const std::string& owner) {
    std::lock_guard lock(mutex_);
    auto& slot = accounts_[owner];
    auto account = slot.lock();
    if (!account) {
      account = std::make_shared<Account>();
      slot = account;
    }
    // Owners whose values are all gone leave the map now and then (it holds no more
    // entries than owners that parsed since).
    if (accounts_.size() > 2 * swept_size_ + 64) {
      std::erase_if(accounts_, [](const auto& entry) { return entry.second.expired(); });
      swept_size_ = accounts_.size();
    }
    return account;
  }
  size_t bytes_of(const std::string& owner) {
    std::lock_guard lock(mutex_);
    auto it = accounts_.find(owner);
    auto account = it == accounts_.end() ? nullptr : it->second.lock();
    return account ? account->bytes.load() : 0;
  }
  std::atomic<size_t> total{0};

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<Account>> accounts_;
  size_t swept_size_ = 0;
};

ParseBudget& budget() {
  static ParseBudget instance;
  return instance;
}

// Why a parse was stopped by its memory (thrown from the allocator, so that the parser
// stops where it is).
struct ParseRefused : std::bad_alloc {
  enum class Reason { kTooComplex, kOwnerShare, kTotal } reason;
  explicit ParseRefused(Reason why) : reason(why) {}
};

// Whether an owner holding `owner_bytes` (of `total_bytes` held by all) is past what it
// may hold: its share is its own; beyond it, it borrows what nobody uses, as long as one
// share stays free for another owner (a limit that wastes nothing when the owner is alone
// and still leaves room for the next one).
bool past_share(size_t owner_bytes, size_t total_bytes) {
  return owner_bytes > kOwnerParseShare && total_bytes > kTotalParseMemory - kOwnerParseShare;
}

// The storage of one body's parse and its value: every byte it takes is counted
// against the owner's account and the total. While the parse runs, an allocation past
// the body's own cap or a budget is refused; once the value is made, allocations in its
// storage (a handler adding to it) are counted but never refused.
class ChargedResource final : public json::memory_resource {
 public:
  ChargedResource(std::shared_ptr<Account> account, size_t cap) : account_(std::move(account)), cap_(cap) {}
  ~ChargedResource() override { uncharge(used_.load()); }
  void stop_enforcing() { enforcing_ = false; }
  size_t cap() const { return cap_; }

 private:
  void* do_allocate(size_t n, size_t align) override {
    charge(n);
    try {
      return ::operator new(n, std::align_val_t(align));
    } catch (...) {
      uncharge(n);
      throw;
    }
  }
  void do_deallocate(void* p, size_t n, size_t align) override {
    ::operator delete(p, n, std::align_val_t(align));
    uncharge(n);
  }
  bool do_is_equal(const json::memory_resource& other) const noexcept override { return this == &other; }
  // Counts `n` more bytes; while the parse runs, refuses them past a bound.
  void charge(size_t n) {
    const size_t owner_now = account_->bytes.fetch_add(n) + n;
    const size_t total_now = budget().total.fetch_add(n) + n;
    const size_t used_now = used_.fetch_add(n) + n;
    if (!enforcing_) return;
    std::optional<ParseRefused::Reason> refused;
    if (used_now > cap_)
      refused = ParseRefused::Reason::kTooComplex;
    else if (past_share(owner_now, total_now))
      refused = ParseRefused::Reason::kOwnerShare;
    else if (total_now > kTotalParseMemory)
      refused = ParseRefused::Reason::kTotal;
    if (refused) {
      uncharge(n);
      throw ParseRefused(*refused);
    }
  }
  void uncharge(size_t n) {
    used_.fetch_sub(n);
    account_->bytes.fetch_sub(n);
    budget().total.fetch_sub(n);
  }

  std::shared_ptr<Account> account_;
  const size_t cap_;
  std::atomic<size_t> used_{0};
  std::atomic<bool> enforcing_{true};
};

ApiError refusal(ParseRefused::Reason reason, size_t cap) {
  switch (reason) {
    case ParseRefused::Reason::kTooComplex:
      return ApiError::too_large("The request body is too complex: parsing it takes more than " +
                                 std::to_string(cap) + " bytes (at most " + std::to_string(kParseFactor) +
                                 " per byte of JSON)");
    case ParseRefused::Reason::kOwnerShare:
      return ApiError::rate_limited(
          "Too much JSON of this owner is being parsed or held at once (past its share of " +
              std::to_string(kOwnerParseShare) +
              " bytes, the rest is kept for others): retry when requests finish",
          1);
    case ParseRefused::Reason::kTotal:
      break;
  }
  return ApiError::overloaded("The server is parsing too much JSON at once: retry shortly", 1);
}

// One body's streaming parse, fed piece by piece.
class ChargedParse {
 public:
  ChargedParse(std::shared_ptr<Account> account, size_t expected_bytes)
      : storage_(json::make_shared_resource<ChargedResource>(
            std::move(account), kParseFactor * expected_bytes + kParseAllowance)),
        parser_(storage_) {
    parser_.reset(storage_);
  }
  Result<void> feed(std::string_view text) {
    try {
      boost::system::error_code ec;
      parser_.write(text.data(), text.size(), ec);
      if (ec) return ApiError::invalid_request(std::string(kNotJson) + ec.message());
      return {};
    } catch (const ParseRefused& refused) {
      return refusal(refused.reason, resource().cap());
    }
  }
  Result<json::value> finish() {
    try {
      boost::system::error_code ec;
      parser_.finish(ec);
      if (ec) return ApiError::invalid_request(std::string(kNotJson) + ec.message());
      json::value value = parser_.release();
      resource().stop_enforcing();
      return value;
    } catch (const ParseRefused& refused) {
      return refusal(refused.reason, resource().cap());
    }
  }

 private:
  ChargedResource& resource() { return *static_cast<ChargedResource*>(storage_.get()); }
  json::storage_ptr storage_;
  json::stream_parser parser_;
};

// Whether the budgets could take `bytes` more for `account` now (checked before a body
// is read: a body the owner's share cannot hold is refused before it is read at all).
std::optional<ApiError> room_for(const Account& account, uint64_t bytes) {
  if (past_share(account.bytes.load() + bytes, budget().total.load() + bytes))
    return refusal(ParseRefused::Reason::kOwnerShare, 0);
  if (budget().total.load() + bytes > kTotalParseMemory) return refusal(ParseRefused::Reason::kTotal, 0);
  return std::nullopt;
}

ApiError body_too_large(uint64_t size, size_t limit) {
  return ApiError::too_large("Request body is " + std::to_string(size) + " bytes; the limit is " +
                             std::to_string(limit) + " bytes");
}

}  // namespace

boost::asio::awaitable<Result<json::value>> read_json_body(server::RequestContext& ctx,
                                                           const JsonBodyLimits& limits) {
  const auto declared = ctx.declared_body_size();
  if (declared && *declared > limits.max_bytes) co_return body_too_large(*declared, limits.max_bytes);
  auto account = budget().account(ctx.owner);
  if (declared)
    if (auto refused = room_for(*account, *declared)) co_return *refused;
  auto parse = std::make_unique<ChargedParse>(account, declared.value_or(limits.max_bytes));
  // A large body (or one of unknown size) is parsed on the blocking pool, a piece at a
  // time as it arrives: the I/O thread serves other connections meanwhile.
  const bool off_thread = !declared || *declared > kInlineParseBytes;
  size_t limit = limits.max_bytes;
  bool top_level_seen = false;
  uint64_t received = 0;
  server::RequestContext::AsyncChunkConsumer consume =
      [&](std::string_view chunk) -> boost::asio::awaitable<Result<void>> {
    received += chunk.size();
    if (!top_level_seen) {
      const auto first = chunk.find_first_not_of(" \t\r\n");
      if (first != std::string_view::npos) {
        top_level_seen = true;
        if (chunk[first] == '[') limit = std::min(limit, limits.max_array_bytes);
        if (declared && *declared > limit) co_return body_too_large(*declared, limit);
      }
    }
    if (received > limit) co_return body_too_large(received, limit);
    if (!off_thread) co_return parse->feed(chunk);
    auto feed = [&parse, chunk] { return parse->feed(chunk); };
    co_return co_await run_blocking(std::move(feed));
  };
  auto read = co_await ctx.read_body_stream_async(limits.max_bytes, consume);
  if (!read) co_return read.error();
  co_return parse->finish();
}

Result<json::value> parse_json_charged(const std::string& owner, std::string_view text) {
  auto account = budget().account(owner);
  if (auto refused = room_for(*account, text.size())) return *refused;
  ChargedParse parse(account, text.size());
  if (auto fed = parse.feed(text); !fed) return fed.error();
  return parse.finish();
}

bool json_syntax_error(const ApiError& error) {
  return error.kind == ErrorKind::invalid && error.message.starts_with(kNotJson);
}

size_t json_parse_bytes_of(const std::string& owner) { return budget().bytes_of(owner); }
size_t json_parse_bytes_total() { return budget().total.load(); }

}  // namespace sandboxd::api
