#include "store/e2b_records.h"

#include <boost/json.hpp>

#include "store/schema.h"

namespace sandboxd::store {
namespace {

namespace json = boost::json;
using db::Statement;
using db::Transaction;

constexpr const char* kColumns =
    "s.id, s.owner, s.template_id, s.metadata, s.env_vars, s.started_at_ms, s.end_at_ms, s.auto_pause, "
    "s.paused";

std::string encode_map(const std::map<std::string, std::string>& map) {
  json::object out;
  for (const auto& [key, value] : map) out[key] = value;
  return json::serialize(out);
}

std::map<std::string, std::string> decode_map(const std::string& text) {
  std::map<std::string, std::string> out;
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec || !value.is_object()) return out;
  for (const auto& [key, item] : value.as_object())
    if (item.is_string()) out[std::string(key)] = std::string(item.as_string());
  return out;
}

E2bRecord read_record(const Statement& row) {
  E2bRecord record;
  record.id = row.text(0);
  record.owner = row.text(1);
  record.template_id = row.text(2);
  record.metadata = decode_map(row.text(3));
  record.env_vars = decode_map(row.text(4));
  record.started_at_ms = row.integer(5);
  record.end_at_ms = row.integer(6);
  record.auto_pause = row.integer(7) != 0;
  record.paused = row.integer(8) != 0;
  return record;
}

std::optional<E2bRecord> find_on(db::Connection& conn, const std::string& owner, const std::string& id,
                                 bool for_update) {
  std::string sql =
      std::string("SELECT ") + kColumns + " FROM e2b_sandboxes s WHERE s.id = ? AND s.owner = ?";
  // (SQLite's write transaction holds the database already.)
  if (for_update && conn.backend() == db::Backend::kPostgres) sql += " FOR UPDATE";
  Statement query(conn, sql);
  query.add(id).add(owner);
  if (!query.step()) return std::nullopt;
  return read_record(query);
}

}  // namespace

E2bRecords::E2bRecords(std::shared_ptr<db::Database> database) : db_(std::move(database)) {
  schema::migrate(*db_);
}

bool E2bRecords::insert(const E2bRecord& record) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  Statement insert(
      conn,
      "INSERT INTO e2b_sandboxes (id, owner, template_id, metadata, env_vars, started_at_ms, "
      "end_at_ms, auto_pause, paused) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING");
  insert.add(record.id)
      .add(record.owner)
      .add(record.template_id)
      .add(encode_map(record.metadata))
      .add(encode_map(record.env_vars))
      .add(record.started_at_ms)
      .add(record.end_at_ms)
      .add(int64_t{record.auto_pause})
      .add(int64_t{record.paused});
  insert.run();
  if (insert.changes() == 0) return false;
  for (const auto& [name, value] : record.metadata) {
    Statement pair(conn,
                   "INSERT INTO e2b_sandbox_metadata (sandbox_id, owner, name, value) VALUES (?, ?, ?, ?)");
    pair.add(record.id).add(record.owner).add_blob(name).add_blob(value);
    pair.run();
  }
  transaction.commit();
  return true;
}

std::optional<E2bRecord> E2bRecords::find(const std::string& owner, const std::string& id) {
  auto conn = db_->acquire();
  return find_on(conn, owner, id, /*for_update=*/false);
}

E2bRecordPage E2bRecords::list(const E2bRecordQuery& query) {
  const size_t limit = std::min(std::max<size_t>(query.limit, 1), kMaxPage);
  std::string sql = std::string("SELECT ") + kColumns;
  // With a metadata filter the first pair's index rows drive the walk, in id order;
  // every other pair is a lookup by (sandbox, name).
  auto pairs = query.metadata.begin();
  const bool by_pair = pairs != query.metadata.end();
  if (by_pair)
    sql +=
        " FROM e2b_sandbox_metadata m JOIN e2b_sandboxes s ON s.id = m.sandbox_id"
        " WHERE m.owner = ? AND m.name = ? AND m.value = ? AND m.sandbox_id > ? AND s.owner = ?";
  else
    sql += " FROM e2b_sandboxes s WHERE s.owner = ? AND s.id > ?";
  if (query.paused) sql += " AND s.paused = ?";
  for (size_t i = 1; i < query.metadata.size(); ++i)
    sql +=
        " AND EXISTS (SELECT 1 FROM e2b_sandbox_metadata o WHERE o.sandbox_id = s.id AND o.name = ? AND "
        "o.value = ?)";
  sql += by_pair ? " ORDER BY m.sandbox_id LIMIT ?" : " ORDER BY s.id LIMIT ?";
  auto conn = db_->acquire();
  Statement select(conn, sql);
  if (by_pair) {
    select.add(query.owner)
        .add_blob(pairs->first)
        .add_blob(pairs->second)
        .add(query.after_id)
        .add(query.owner);
    ++pairs;
  } else {
    select.add(query.owner).add(query.after_id);
  }
  if (query.paused) select.add(int64_t{*query.paused});
  for (; pairs != query.metadata.end(); ++pairs) select.add_blob(pairs->first).add_blob(pairs->second);
  select.add(static_cast<int64_t>(limit + 1));  // one more: whether there is a next page
  E2bRecordPage page;
  while (select.step()) {
    if (page.records.size() == limit) {
      page.has_more = true;
      break;
    }
    page.records.push_back(read_record(select));
  }
  return page;
}

bool E2bRecords::set_end(const std::string& owner, const std::string& id, int64_t end_at_ms) {
  auto conn = db_->acquire();
  Statement update(conn, "UPDATE e2b_sandboxes SET end_at_ms = ? WHERE id = ? AND owner = ?");
  update.add(end_at_ms).add(id).add(owner);
  update.run();
  return update.changes() > 0;
}

bool E2bRecords::mark_paused(const std::string& owner, const std::string& id) {
  auto conn = db_->acquire();
  Statement update(conn, "UPDATE e2b_sandboxes SET paused = 1 WHERE id = ? AND owner = ? AND paused = 0");
  update.add(id).add(owner);
  update.run();
  return update.changes() > 0;
}

bool E2bRecords::mark_paused_if_due(const std::string& owner, const std::string& id, int64_t now_ms) {
  auto conn = db_->acquire();
  Statement update(conn,
                   "UPDATE e2b_sandboxes SET paused = 1 WHERE id = ? AND owner = ? AND paused = 0 AND "
                   "end_at_ms <= ?");
  update.add(id).add(owner).add(now_ms);
  update.run();
  return update.changes() > 0;
}

std::optional<bool> E2bRecords::resume(const std::string& owner, const std::string& id,
                                       std::optional<int64_t> end_at_least_ms, int64_t end_if_paused_ms) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  auto record = find_on(conn, owner, id, /*for_update=*/true);
  if (!record) return std::nullopt;
  int64_t end = record->end_at_ms;
  if (end_at_least_ms)
    end = std::max(end, *end_at_least_ms);
  else if (record->paused)
    end = std::max(end, end_if_paused_ms);
  Statement update(conn, "UPDATE e2b_sandboxes SET paused = 0, end_at_ms = ? WHERE id = ? AND owner = ?");
  update.add(end).add(id).add(owner);
  update.run();
  transaction.commit();
  return record->paused;
}

bool E2bRecords::remove(const std::string& owner, const std::string& id) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  Statement remove(conn, "DELETE FROM e2b_sandboxes WHERE id = ? AND owner = ?");
  remove.add(id).add(owner);
  remove.run();
  if (remove.changes() == 0) return false;
  Statement pairs(conn, "DELETE FROM e2b_sandbox_metadata WHERE sandbox_id = ? AND owner = ?");
  pairs.add(id).add(owner);
  pairs.run();
  transaction.commit();
  return true;
}

std::vector<E2bRecord> E2bRecords::due(int64_t now_ms, const E2bDueCursor& cursor, size_t limit) {
  auto conn = db_->acquire();
  Statement select(conn, std::string("SELECT ") + kColumns +
                             " FROM e2b_sandboxes s WHERE s.paused = 0 AND s.end_at_ms <= ? AND "
                             "(s.end_at_ms > ? OR (s.end_at_ms = ? AND s.id > ?)) ORDER BY s.end_at_ms, s.id "
                             "LIMIT ?");
  select.add(now_ms)
      .add(cursor.end_at_ms)
      .add(cursor.end_at_ms)
      .add(cursor.id)
      .add(static_cast<int64_t>(limit));
  std::vector<E2bRecord> out;
  while (select.step()) out.push_back(read_record(select));
  return out;
}

}  // namespace sandboxd::store
