// E2B's sandbox records (store/e2b_records.h) on both backends, SQLite and a real
// PostgreSQL the test starts: the owner checked on every read and write, listings
// filtered by metadata and state and paged by the database, the walk over sandboxes
// past their end time, pause and resume, metadata that is not UTF-8, the plan a
// listing by metadata gets (an index, not a walk of every row), and the copy held in
// memory: under its token only, the same as a read of the database after every write.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "postgres_harness.h"
#include "store/e2b_records.h"
#include "store/metadata.h"

namespace sandboxd::store {
namespace {

class E2bRecordsTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  static E2bRecord record(const std::string& id, const std::string& owner,
                          std::map<std::string, std::string> metadata = {}, int64_t end_at_ms = 1'000'000) {
    E2bRecord r;
    r.id = id;
    r.owner = owner;
    r.template_id = "base";
    r.metadata = std::move(metadata);
    r.env_vars = {{"LEVEL", "one"}};
    r.started_at_ms = 1000;
    r.end_at_ms = end_at_ms;
    return r;
  }
  static std::vector<std::string> ids_of(const std::vector<E2bRecord>& records) {
    std::vector<std::string> out;
    for (const auto& r : records) out.push_back(r.id);
    return out;
  }
  E2bRecordPage list(std::map<std::string, std::string> metadata, std::optional<bool> paused = {},
                     const std::string& after = "", size_t limit = 100, const std::string& owner = "alice") {
    E2bRecordQuery query;
    query.owner = owner;
    query.metadata = std::move(metadata);
    query.paused = paused;
    query.after_id = after;
    query.after_started_ms = 1000;  // every record's start (record())
    query.limit = limit;
    return records_.list(query);
  }

  sandboxd::testing::TestDatabase database_{GetParam()};
  E2bRecords records_{database_.open()};
};

INSTANTIATE_TEST_SUITE_P(Backends, E2bRecordsTest,
                         ::testing::Values(db::Backend::kSqlite, db::Backend::kPostgres),
                         sandboxd::testing::backend_name);

TEST_P(E2bRecordsTest, OwnerCheckedOnEveryReadAndWrite) {
  ASSERT_TRUE(records_.insert(record("s1", "alice", {{"job", "report"}})));
  EXPECT_FALSE(records_.insert(record("s1", "bob")));  // the id is taken: nothing changes
  auto found = records_.find("alice", "s1");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->template_id, "base");
  EXPECT_EQ(found->metadata, (std::map<std::string, std::string>{{"job", "report"}}));
  EXPECT_EQ(found->env_vars, (std::map<std::string, std::string>{{"LEVEL", "one"}}));
  EXPECT_EQ(found->end_at_ms, 1'000'000);
  EXPECT_FALSE(records_.find("bob", "s1"));
  EXPECT_FALSE(records_.set_end("bob", "s1", 5));
  EXPECT_FALSE(records_.mark_paused("bob", "s1"));
  EXPECT_FALSE(records_.resume("bob", "s1", 5, 5));
  EXPECT_FALSE(records_.remove("bob", "s1"));
  EXPECT_TRUE(list({}, {}, "", 100, "bob").records.empty());
  EXPECT_TRUE(list({{"job", "report"}}, {}, "", 100, "bob").records.empty());
  EXPECT_EQ(records_.find("alice", "s1")->end_at_ms, 1'000'000);
  EXPECT_TRUE(records_.remove("alice", "s1"));
  EXPECT_FALSE(records_.find("alice", "s1"));
  EXPECT_TRUE(list({{"job", "report"}}).records.empty());  // its metadata rows went with it
}

TEST_P(E2bRecordsTest, ListsFilterByMetadataAndStateAndPageInIdOrder) {
  for (int i = 0; i < 30; ++i) {
    const std::string id = "s" + std::string(i < 10 ? "0" : "") + std::to_string(i);
    ASSERT_TRUE(records_.insert(
        record(id, "alice", {{"parity", i % 2 ? "odd" : "even"}, {"third", i % 3 == 0 ? "yes" : "no"}})));
  }
  ASSERT_TRUE(records_.insert(record("x1", "bob", {{"parity", "even"}})));
  ASSERT_TRUE(records_.mark_paused("alice", "s00"));
  ASSERT_TRUE(records_.mark_paused("alice", "s06"));
  EXPECT_FALSE(records_.mark_paused("alice", "s06"));  // paused already

  auto all = list({});
  EXPECT_EQ(all.records.size(), 30u);
  EXPECT_FALSE(all.has_more);
  EXPECT_TRUE(std::is_sorted(all.records.begin(), all.records.end(),
                             [](const auto& a, const auto& b) { return a.id < b.id; }));
  // Both pairs must match: even and a multiple of three.
  EXPECT_EQ(ids_of(list({{"parity", "even"}, {"third", "yes"}}).records),
            (std::vector<std::string>{"s00", "s06", "s12", "s18", "s24"}));
  EXPECT_EQ(ids_of(list({{"parity", "even"}, {"third", "yes"}}, false).records),
            (std::vector<std::string>{"s12", "s18", "s24"}));
  EXPECT_EQ(ids_of(list({}, true).records), (std::vector<std::string>{"s00", "s06"}));
  EXPECT_TRUE(list({{"parity", "none"}}).records.empty());
  EXPECT_TRUE(list({{"nothing", "even"}}).records.empty());

  // Pages of 4 of the 15 odd ones, each continuing after the last id of the one before.
  std::vector<std::string> seen;
  std::string after;
  int pages = 0;
  for (;; ++pages) {
    auto page = list({{"parity", "odd"}}, {}, after, 4);
    ASSERT_LE(page.records.size(), 4u);
    for (const auto& r : page.records) seen.push_back(r.id);
    if (!page.has_more) break;
    after = page.records.back().id;
  }
  EXPECT_EQ(pages, 3);  // 4 + 4 + 4 + 3
  EXPECT_EQ(seen.size(), 15u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 15u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  // Without a filter too; an exact page has no next one.
  auto first = list({}, {}, "", 29);
  EXPECT_TRUE(first.has_more);
  auto rest = list({}, {}, first.records.back().id, 29);
  EXPECT_EQ(ids_of(rest.records), (std::vector<std::string>{"s29"}));
  EXPECT_FALSE(rest.has_more);
}

TEST_P(E2bRecordsTest, ListsByStartTimeNewestFirstWithTemplateAndStartRange) {
  // Started at 1000, 2000, ... 6000, inserted out of order; two share a start time.
  const std::vector<std::pair<std::string, int64_t>> made = {{"b3", 3000}, {"a1", 1000}, {"c6", 6000},
                                                             {"a5", 5000}, {"z5", 5000}, {"b2", 2000}};
  for (const auto& [id, started] : made) {
    auto r = record(id, "alice", {{"job", "x"}});
    r.started_at_ms = started;
    r.template_id = id == "b2" || id == "z5" ? "code-interpreter-v1" : "base";
    ASSERT_TRUE(records_.insert(r));
  }
  auto page = [&](bool newest_first, std::map<std::string, std::string> metadata, size_t limit,
                  const E2bRecord* after) {
    E2bRecordQuery query;
    query.owner = "alice";
    query.metadata = std::move(metadata);
    query.newest_first = newest_first;
    query.limit = limit;
    if (after) {
      query.after_id = after->id;
      query.after_started_ms = after->started_at_ms;
    }
    return records_.list(query);
  };
  const std::vector<std::string> newest = {"c6", "z5", "a5", "b3", "b2", "a1"};
  EXPECT_EQ(ids_of(page(true, {}, 100, nullptr).records), newest);
  EXPECT_EQ(ids_of(page(false, {}, 100, nullptr).records),
            (std::vector<std::string>{"a1", "b2", "b3", "a5", "z5", "c6"}));
  // Pages of two keep the order across pages, with a metadata filter and without.
  for (const bool by_metadata : {false, true}) {
    std::vector<std::string> seen;
    std::optional<E2bRecord> last;
    for (int pages = 0; pages < 10; ++pages) {
      auto next = page(true,
                       by_metadata ? std::map<std::string, std::string>{{"job", "x"}}
                                   : std::map<std::string, std::string>{},
                       2, last ? &*last : nullptr);
      for (const auto& r : next.records) seen.push_back(r.id);
      if (!next.has_more) break;
      last = next.records.back();
    }
    EXPECT_EQ(seen, newest);
  }
  E2bRecordQuery query;
  query.owner = "alice";
  query.newest_first = true;
  query.template_id = "code-interpreter-v1";
  EXPECT_EQ(ids_of(records_.list(query).records), (std::vector<std::string>{"z5", "b2"}));
  query.template_id.reset();
  query.started_from_ms = 2000;
  query.started_to_ms = 5000;
  EXPECT_EQ(ids_of(records_.list(query).records), (std::vector<std::string>{"z5", "a5", "b3", "b2"}));
  query.started_from_ms = 7000;
  query.started_to_ms = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(records_.list(query).records.empty());
}

TEST_P(E2bRecordsTest, MetadataThatIsNotUtf8IsKeptAndMatchedByItsBytes) {
  const std::string odd("caf\xe9\xff", 5);
  ASSERT_TRUE(records_.insert(record("s1", "alice", {{"name", "plain"}})));
  // The record's own copy is JSON (text); the filter's rows are bytes, so a filter of
  // any bytes is answered (nothing matches), never a database error.
  EXPECT_TRUE(list({{odd, odd}}).records.empty());
  EXPECT_EQ(ids_of(list({{"name", "plain"}}).records), (std::vector<std::string>{"s1"}));
}

TEST_P(E2bRecordsTest, DueWalksRunningSandboxesPastTheirEndInOrderFromACursor) {
  ASSERT_TRUE(records_.insert(record("late", "alice", {}, 500)));
  ASSERT_TRUE(records_.insert(record("b-early", "alice", {}, 100)));
  ASSERT_TRUE(records_.insert(record("a-early", "bob", {}, 100)));
  ASSERT_TRUE(records_.insert(record("future", "alice", {}, 10'000)));
  ASSERT_TRUE(records_.insert(record("paused", "alice", {}, 50)));
  ASSERT_TRUE(records_.mark_paused("alice", "paused"));
  EXPECT_EQ(ids_of(records_.due(1000, {}, 10)), (std::vector<std::string>{"a-early", "b-early", "late"}));
  EXPECT_EQ(ids_of(records_.due(1000, {}, 2)), (std::vector<std::string>{"a-early", "b-early"}));
  EXPECT_EQ(ids_of(records_.due(1000, {100, "a-early"}, 10)), (std::vector<std::string>{"b-early", "late"}));
  EXPECT_EQ(ids_of(records_.due(1000, {100, "b-early"}, 10)), (std::vector<std::string>{"late"}));
  EXPECT_TRUE(records_.due(99, {}, 10).empty());

  // The timeout's pause happens only while the record is still due and running.
  EXPECT_FALSE(records_.mark_paused_if_due("alice", "future", 1000));
  EXPECT_TRUE(records_.mark_paused_if_due("alice", "late", 1000));
  EXPECT_FALSE(records_.mark_paused_if_due("alice", "late", 1000));
  EXPECT_EQ(ids_of(records_.due(1000, {}, 10)), (std::vector<std::string>{"a-early", "b-early"}));
}

TEST_P(E2bRecordsTest, ResumeClearsThePauseAndNeverShortensTheLife) {
  ASSERT_TRUE(records_.insert(record("s1", "alice", {}, 5000)));
  // Running, no timeout asked: the end time stays.
  EXPECT_EQ(records_.resume("alice", "s1", std::nullopt, 9000), std::optional<bool>(false));
  EXPECT_EQ(records_.find("alice", "s1")->end_at_ms, 5000);
  // A shorter timeout does not shorten it; a longer one lengthens it.
  EXPECT_EQ(records_.resume("alice", "s1", 4000, 9000), std::optional<bool>(false));
  EXPECT_EQ(records_.find("alice", "s1")->end_at_ms, 5000);
  EXPECT_EQ(records_.resume("alice", "s1", 7000, 9000), std::optional<bool>(false));
  EXPECT_EQ(records_.find("alice", "s1")->end_at_ms, 7000);
  // Paused, no timeout asked: at least the default from now.
  ASSERT_TRUE(records_.mark_paused("alice", "s1"));
  EXPECT_EQ(records_.resume("alice", "s1", std::nullopt, 9000), std::optional<bool>(true));
  auto after = records_.find("alice", "s1");
  EXPECT_FALSE(after->paused);
  EXPECT_EQ(after->end_at_ms, 9000);
  EXPECT_FALSE(records_.resume("alice", "nope", std::nullopt, 9000));
}

// What a read of the database finds, field by field.
void expect_same(const E2bRecord& held, const std::optional<E2bRecord>& read) {
  ASSERT_TRUE(read);
  EXPECT_EQ(held.id, read->id);
  EXPECT_EQ(held.owner, read->owner);
  EXPECT_EQ(held.template_id, read->template_id);
  EXPECT_EQ(held.metadata, read->metadata);
  EXPECT_EQ(held.env_vars, read->env_vars);
  EXPECT_EQ(held.started_at_ms, read->started_at_ms);
  EXPECT_EQ(held.end_at_ms, read->end_at_ms);
  EXPECT_EQ(held.auto_pause, read->auto_pause);
  EXPECT_EQ(held.paused, read->paused);
}

TEST_P(E2bRecordsTest, TheHeldCopyIsTheDatabasesAfterEveryWrite) {
  records_.enable_cache();
  const E2bHold hold{7, "storage-1"};
  E2bRecord held;
  ASSERT_TRUE(records_.insert(record("s1", "alice", {{"job", "report"}, {"k\"y", "\u00e9\n"}}), hold));
  ASSERT_EQ(records_.cached_find("alice", "s1", 7, held), E2bRecords::Cached::kFound);
  expect_same(held, records_.find("alice", "s1"));
  // Another owner's: not found from memory, as from the database.
  EXPECT_EQ(records_.cached_find("bob", "s1", 7, held), E2bRecords::Cached::kNotFound);
  EXPECT_FALSE(records_.find("bob", "s1"));

  const auto check = [&] {
    E2bRecord now;
    ASSERT_EQ(records_.cached_find("alice", "s1", 7, now), E2bRecords::Cached::kFound);
    expect_same(now, records_.find("alice", "s1"));
  };
  ASSERT_TRUE(records_.set_end("alice", "s1", 4000));
  check();
  EXPECT_FALSE(records_.set_end("bob", "s1", 1));  // another owner's write changes nothing
  check();
  ASSERT_TRUE(records_.mark_paused("alice", "s1"));
  check();
  ASSERT_EQ(records_.resume("alice", "s1", 6000, 9000), std::optional<bool>(true));
  check();
  EXPECT_FALSE(records_.mark_paused_if_due("alice", "s1", 5000));  // not due yet
  check();
  ASSERT_TRUE(records_.mark_paused_if_due("alice", "s1", 6000));
  check();
  ASSERT_TRUE(records_.remove("alice", "s1"));
  EXPECT_EQ(records_.cached_find("alice", "s1", 7, held), E2bRecords::Cached::kNotHeld);
  EXPECT_EQ(records_.cached(), 0u);
}

TEST_P(E2bRecordsTest, AHeldCopyIsFoundOnlyUnderItsToken) {
  records_.enable_cache();
  ASSERT_TRUE(records_.insert(record("s1", "alice")));  // no hold: not held
  E2bRecord held;
  EXPECT_EQ(records_.cached_find("alice", "s1", 0, held), E2bRecords::Cached::kNotHeld);
  // A read with a hold fills it.
  ASSERT_TRUE(records_.find("alice", "s1", E2bHold{3, "storage-1"}));
  EXPECT_EQ(records_.cached_find("alice", "s1", 3, held), E2bRecords::Cached::kFound);
  // Under another lease's epoch it is not served, and is forgotten.
  EXPECT_EQ(records_.cached_find("alice", "s1", 4, held), E2bRecords::Cached::kNotHeld);
  EXPECT_EQ(records_.cached_find("alice", "s1", 3, held), E2bRecords::Cached::kNotHeld);
  // Letting the container's lease go forgets it.
  ASSERT_TRUE(records_.find("alice", "s1", E2bHold{4, "storage-1"}));
  records_.forget_storage("storage-other");
  EXPECT_EQ(records_.cached_find("alice", "s1", 4, held), E2bRecords::Cached::kFound);
  records_.forget_storage("storage-1");
  EXPECT_EQ(records_.cached_find("alice", "s1", 4, held), E2bRecords::Cached::kNotHeld);
  // A read that finds nothing holds nothing.
  EXPECT_FALSE(records_.find("alice", "nope", E2bHold{}));
  EXPECT_EQ(records_.cached(), 0u);
}

// A write through another E2bRecords (another replica) is not seen by the held copy:
// why a cluster holds only what the holder of a sandbox's container alone writes.
TEST_P(E2bRecordsTest, AnotherWritersChangeIsNotSeen) {
  records_.enable_cache();
  ASSERT_TRUE(records_.insert(record("s1", "alice", {}, 5000), E2bHold{}));
  E2bRecords other(database_.open());
  ASSERT_TRUE(other.set_end("alice", "s1", 8000));
  E2bRecord held;
  ASSERT_EQ(records_.cached_find("alice", "s1", 0, held), E2bRecords::Cached::kFound);
  EXPECT_EQ(held.end_at_ms, 5000);
  EXPECT_EQ(records_.find("alice", "s1")->end_at_ms, 8000);
}

TEST_P(E2bRecordsTest, TheHeldCopiesAreBounded) {
  records_.enable_cache(E2bCacheLimits{2, 64u << 10});
  for (const char* id : {"s1", "s2", "s3"}) ASSERT_TRUE(records_.insert(record(id, "alice"), E2bHold{}));
  E2bRecord held;
  // The least recently used went first.
  EXPECT_EQ(records_.cached_find("alice", "s1", 0, held), E2bRecords::Cached::kNotHeld);
  EXPECT_EQ(records_.cached_find("alice", "s2", 0, held), E2bRecords::Cached::kFound);
  ASSERT_TRUE(records_.insert(record("s4", "alice"), E2bHold{}));  // s3 is the older now
  EXPECT_EQ(records_.cached_find("alice", "s3", 0, held), E2bRecords::Cached::kNotHeld);
  EXPECT_EQ(records_.cached_find("alice", "s2", 0, held), E2bRecords::Cached::kFound);
  EXPECT_EQ(records_.cached(), 2u);
  // A record larger than a tenth of the bytes is read each time, never held.
  auto large = record("s5", "alice");
  large.env_vars["BIG"] = std::string(10u << 10, 'x');
  ASSERT_TRUE(records_.insert(large, E2bHold{}));
  EXPECT_EQ(records_.cached_find("alice", "s5", 0, held), E2bRecords::Cached::kNotHeld);
  EXPECT_EQ(records_.find("alice", "s5", E2bHold{})->env_vars.at("BIG").size(), 10u << 10);
  EXPECT_EQ(records_.cached_find("alice", "s5", 0, held), E2bRecords::Cached::kNotHeld);
}

// The listing by a metadata pair reads that pair's index rows, whatever the number of
// the owner's sandboxes, then orders what matched by start time (the plan names the
// index; SQLite's planner is asked directly; the query is the one E2bRecords::list makes).
TEST_P(E2bRecordsTest, AListingByMetadataUsesItsIndex) {
  for (int i = 0; i < 1000; ++i)
    ASSERT_TRUE(
        records_.insert(record("s" + std::to_string(10000 + i), "alice", {{"n", std::to_string(i)}})));
  EXPECT_EQ(ids_of(list({{"n", "150"}}).records), (std::vector<std::string>{"s10150"}));
  auto database = database_.open();
  auto conn = database->acquire();
  const bool sqlite = GetParam() == db::Backend::kSqlite;
  if (!sqlite) conn.exec("ANALYZE e2b_sandbox_metadata; ANALYZE e2b_sandboxes");
  db::Statement plan(
      conn, std::string(sqlite ? "EXPLAIN QUERY PLAN " : "EXPLAIN ") +
                "SELECT s.id FROM e2b_sandbox_metadata m JOIN e2b_sandboxes s ON s.id = "
                "m.sandbox_id WHERE m.owner = 'alice' AND m.name = " +
                (sqlite ? "'n'" : "'n'::bytea") + " AND m.value = " + (sqlite ? "'150'" : "'150'::bytea") +
                " AND s.owner = 'alice' AND s.started_at_ms >= 0 AND s.started_at_ms <= 9000000000000"
                " ORDER BY s.started_at_ms DESC, s.id DESC LIMIT 101");
  std::string text;
  while (plan.step()) text += plan.text(sqlite ? 3 : 0) + "\n";
  EXPECT_NE(text.find("e2b_sandbox_metadata_by_pair"), std::string::npos) << text;
}

// E2B's snapshots: found by id or name by their owner only, a name naming one snapshot
// of its owner, listed newest first and paged, filtered by source and key, counted, and
// their bytes in the owner's stored bytes (Metadata::owner_bytes, the same database).
TEST_P(E2bRecordsTest, SnapshotsAreTheOwnersFoundByIdOrNameAndCountInStoredBytes) {
  auto snapshot = [](const std::string& id, const std::string& owner, const std::string& name, int64_t at) {
    E2bSnapshotRecord s;
    s.id = id;
    s.owner = owner;
    s.name = name;
    s.source_sandbox = "sandbox1";
    s.created_at_ms = at;
    s.bytes = 1000;
    s.memory = name == "named";
    return s;
  };
  ASSERT_TRUE(records_.insert_snapshot(snapshot("snapa", "alice", "", 10)));
  ASSERT_TRUE(records_.insert_snapshot(snapshot("snapb", "alice", "named", 20)));
  EXPECT_FALSE(records_.insert_snapshot(snapshot("snapc", "alice", "named", 30)));  // the name is taken
  EXPECT_FALSE(records_.insert_snapshot(snapshot("snapa", "bob", "", 30)));         // the id is taken
  ASSERT_TRUE(records_.insert_snapshot(snapshot("snapd", "bob", "named", 30)));     // bob's own name
  EXPECT_EQ(records_.find_snapshot("alice", "named")->id, "snapb");
  EXPECT_TRUE(records_.find_snapshot("alice", "named")->memory);
  EXPECT_EQ(records_.find_snapshot("alice", "snapa")->source_sandbox, "sandbox1");
  EXPECT_FALSE(records_.find_snapshot("bob", "snapa"));
  EXPECT_FALSE(records_.find_snapshot("alice", ""));  // an unnamed one is not found by the empty name
  EXPECT_EQ(records_.count_snapshots("alice"), 2u);

  E2bSnapshotQuery query;
  query.owner = "alice";
  query.limit = 1;
  auto first = records_.list_snapshots(query);
  ASSERT_EQ(first.snapshots.size(), 1u);
  EXPECT_EQ(first.snapshots[0].id, "snapb");  // newest first
  EXPECT_TRUE(first.has_more);
  query.after_created_ms = first.snapshots[0].created_at_ms;
  query.after_id = first.snapshots[0].id;
  auto second = records_.list_snapshots(query);
  ASSERT_EQ(second.snapshots.size(), 1u);
  EXPECT_EQ(second.snapshots[0].id, "snapa");
  EXPECT_FALSE(second.has_more);
  E2bSnapshotQuery by_key;
  by_key.owner = "alice";
  by_key.key = "named";
  EXPECT_EQ(records_.list_snapshots(by_key).snapshots.size(), 1u);
  by_key.key.clear();
  by_key.source_sandbox = "another";
  EXPECT_TRUE(records_.list_snapshots(by_key).snapshots.empty());

  Metadata metadata(database_.open());
  EXPECT_EQ(metadata.owner_bytes("alice"), 2000u);
  EXPECT_EQ(metadata.owner_bytes("bob"), 1000u);
  EXPECT_FALSE(records_.remove_snapshot("bob", "snapb"));
  EXPECT_TRUE(records_.remove_snapshot("alice", "snapb"));
  EXPECT_FALSE(records_.remove_snapshot("alice", "snapb"));
  EXPECT_EQ(metadata.owner_bytes("alice"), 1000u);
  EXPECT_EQ(records_.count_snapshots("alice"), 1u);
  EXPECT_TRUE(records_.insert_snapshot(snapshot("snape", "alice", "named", 40)));  // the name is free again
}

}  // namespace
}  // namespace sandboxd::store
