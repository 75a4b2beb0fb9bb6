#include "store/database.h"

#include <libpq-fe.h>
#include <sqlite3.h>

#include <cstdlib>
#include <map>
#include <stdexcept>
#include <utility>

namespace sandboxd::store::db {
namespace {

constexpr int kSqliteBusyTimeoutMs = 5000;
constexpr Oid kInt8Oid = 20;
constexpr Oid kByteaOid = 17;

[[noreturn]] void sqlite_fail(sqlite3* db, std::string_view what) {
  if (db && (sqlite3_errcode(db) == SQLITE_BUSY || sqlite3_errcode(db) == SQLITE_LOCKED))
    throw TimeoutError("sqlite: " + std::string(what) + ": " + sqlite3_errmsg(db));
  throw std::runtime_error("sqlite: " + std::string(what) + ": " +
                           (db ? sqlite3_errmsg(db) : "out of memory"));
}

std::string trimmed(const char* message) {
  std::string text = message ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// SQLSTATE classes of a statement that gave up waiting: 55P03 lock_not_available
// (lock_timeout), 57014 query_canceled (statement_timeout).
bool waited_too_long(const PGresult* result) {
  const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  return state && (std::string_view(state) == "55P03" || std::string_view(state) == "57014");
}

[[noreturn]] void postgres_fail(PGconn* conn, std::string_view what, const PGresult* result = nullptr) {
  std::string message = result ? trimmed(PQresultErrorMessage(result)) : "";
  if (message.empty()) message = trimmed(PQerrorMessage(conn));
  if (waited_too_long(result)) throw TimeoutError("postgres: " + std::string(what) + ": " + message);
  throw std::runtime_error("postgres: " + std::string(what) + ": " + message);
}

void sqlite_exec(sqlite3* db, const std::string& sql) {
  char* message = nullptr;
  if (int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message); rc != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db);
    sqlite3_free(message);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) throw TimeoutError("sqlite: " + text);
    throw std::runtime_error("sqlite: " + text);
  }
}

void postgres_exec(PGconn* conn, const std::string& sql) {
  PGresult* result = PQexec(conn, sql.c_str());
  auto status = PQresultStatus(result);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    std::string message = trimmed(result ? PQresultErrorMessage(result) : PQerrorMessage(conn));
    const bool timed_out = waited_too_long(result);
    PQclear(result);
    if (timed_out) throw TimeoutError("postgres: exec: " + message);
    throw std::runtime_error("postgres: exec: " + message);
  }
  PQclear(result);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// BYTEA in the text result format is "\x" and two hex digits a byte (bytea_output = hex,
// the default since PostgreSQL 9.0; set per connection in postgres_database.cc).
std::string decode_bytea_hex(const char* data, size_t size) {
  if (size < 2 || data[0] != '\\' || data[1] != 'x')
    throw std::runtime_error("postgres: blob: a BYTEA value is not in hex form");
  std::string out;
  out.reserve((size - 2) / 2);
  for (size_t i = 2; i + 1 < size; i += 2) {
    int high = hex_value(data[i]), low = hex_value(data[i + 1]);
    if (high < 0 || low < 0) throw std::runtime_error("postgres: blob: a BYTEA value is not in hex form");
    out.push_back(static_cast<char>(high << 4 | low));
  }
  return out;
}

}  // namespace

// ------------------------------------------------------------------ placeholders

std::string number_placeholders(std::string_view sql, int& count) {
  std::string out;
  out.reserve(sql.size() + 16);
  count = 0;
  char quote = 0;  // inside '...' or "..." (a doubled quote closes and reopens: same result)
  for (char c : sql) {
    if (quote) {
      if (c == quote) quote = 0;
      out.push_back(c);
    } else if (c == '\'' || c == '"') {
      quote = c;
      out.push_back(c);
    } else if (c == '?') {
      out += "$" + std::to_string(++count);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// ------------------------------------------------------------------ SQLite

// Statements prepared once and reused (reset, bindings cleared) by their SQL text:
// parsing and planning a statement costs far more than running the small ones the
// stores run, several of them after every command. Bounded, for SQL assembled from
// optional pieces; a statement already in use (the same SQL nested) gets one of its own.
struct SqliteStatementCache {
  static constexpr size_t kMaxStatements = 256;
  struct Entry {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  std::map<std::string, Entry, std::less<>> statements;

  void clear() {
    for (auto& [sql, entry] : statements) sqlite3_finalize(entry.stmt);
    statements.clear();
  }
};

class SqliteDatabase final : public Database {
 public:
  explicit SqliteDatabase(const std::string& path) : Database(Backend::kSqlite) {
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      throw std::runtime_error("sqlite: cannot open " + path + ": " + message);
    }
    try {
      sqlite3_busy_timeout(db_, kSqliteBusyTimeoutMs);
      sqlite_exec(db_, "PRAGMA journal_mode = WAL");
      sqlite_exec(db_, "PRAGMA synchronous = NORMAL");
    } catch (...) {
      sqlite3_close(db_);
      throw;
    }
  }
  ~SqliteDatabase() override {
    statements_.clear();
    sqlite3_close(db_);
  }

  Connection acquire() override {
    return Connection(Backend::kSqlite, db_, std::unique_lock(mutex_), &statements_);
  }

 private:
  void release(pg_conn*, PostgresSession*) override {}

  std::mutex mutex_;
  sqlite3* db_ = nullptr;
  SqliteStatementCache statements_;  // under mutex_
};

std::shared_ptr<Database> open_sqlite(const std::string& path) {
  return std::make_shared<SqliteDatabase>(path);
}

// ------------------------------------------------------------------ Connection

Connection::Connection(Connection&& other) noexcept
    : backend_(other.backend_),
      sqlite_(std::exchange(other.sqlite_, nullptr)),
      sqlite_lock_(std::move(other.sqlite_lock_)),
      sqlite_statements_(std::exchange(other.sqlite_statements_, nullptr)),
      postgres_(std::exchange(other.postgres_, nullptr)),
      session_(std::exchange(other.session_, nullptr)),
      owner_(std::exchange(other.owner_, nullptr)) {}

Connection::~Connection() {
  if (postgres_ && owner_) owner_->release(postgres_, session_);
}

void Connection::exec(std::string_view sql) {
  if (backend_ == Backend::kSqlite)
    sqlite_exec(sqlite_, std::string(sql));
  else
    postgres_exec(postgres_, std::string(sql));
}

// ------------------------------------------------------------------ Statement

// PostgreSQL: the parameters collected until the first step(), then the whole result
// (text format) from one round trip.
struct PostgresQuery {
  std::string sql;
  int parameters = 0;
  std::vector<std::string> values;
  std::vector<char> is_null;
  std::vector<Oid> types;
  std::vector<int> formats;
  PGresult* result = nullptr;
  int row = -1;
  int rows = 0;

  ~PostgresQuery() { PQclear(result); }

  void set(int index, std::string value, Oid type, int format, bool null = false) {
    if (index < 1 || index > parameters)
      throw std::runtime_error("postgres: bind: parameter " + std::to_string(index) + " out of range");
    values[index - 1] = std::move(value);
    types[index - 1] = type;
    formats[index - 1] = format;
    is_null[index - 1] = null;
  }
};

Statement::Statement(Connection& conn, std::string_view sql) : conn_(conn) {
  if (conn.backend() == Backend::kSqlite) {
    SqliteStatementCache* cache = conn.sqlite_statements_;
    auto found = cache ? cache->statements.find(sql) : decltype(cache->statements)::iterator();
    if (cache && found != cache->statements.end() && !found->second.in_use) {
      found->second.in_use = true;
      cached_in_use_ = &found->second.in_use;
      stmt_ = found->second.stmt;
      return;
    }
    if (sqlite3_prepare_v2(conn.sqlite_handle(), sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) !=
        SQLITE_OK)
      sqlite_fail(conn.sqlite_handle(), "prepare");
    if (cache && found == cache->statements.end() &&
        cache->statements.size() < SqliteStatementCache::kMaxStatements && stmt_) {
      auto& entry = cache->statements[std::string(sql)];
      entry = {stmt_, true};
      cached_in_use_ = &entry.in_use;
    }
    return;
  }
  pg_ = std::make_unique<PostgresQuery>();
  pg_->sql = number_placeholders(sql, pg_->parameters);
  pg_->values.resize(pg_->parameters);
  pg_->is_null.assign(pg_->parameters, 1);  // unbound parameters are NULL, as in SQLite
  pg_->types.assign(pg_->parameters, 0);
  pg_->formats.assign(pg_->parameters, 0);
}

Statement::~Statement() {
  if (!stmt_) return;
  if (!cached_in_use_) {
    sqlite3_finalize(stmt_);
    return;
  }
  // Reset ends its read of the database (a statement left mid-rows would keep a WAL
  // snapshot open); the bindings go so that nothing of this call reaches the next.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  *cached_in_use_ = false;
}

Statement& Statement::bind(int index, std::string_view value) {
  if (pg_) {
    pg_->set(index, std::string(value), 0, 0);  // untyped: the server infers it, as SQLite would accept it
    return *this;
  }
  if (sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT) !=
      SQLITE_OK)
    sqlite_fail(conn_.sqlite_handle(), "bind");
  return *this;
}

Statement& Statement::bind(int index, int64_t value) {
  if (pg_) {
    pg_->set(index, std::to_string(value), kInt8Oid, 0);
    return *this;
  }
  if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK) sqlite_fail(conn_.sqlite_handle(), "bind");
  return *this;
}

// SQLite keeps byte strings as TEXT: every existing row holds its paths that way, and
// TEXT and BLOB values never compare equal in SQLite.
Statement& Statement::bind_blob(int index, std::string_view value) {
  if (pg_) {
    pg_->set(index, std::string(value), kByteaOid, 1);
    return *this;
  }
  return bind(index, value);
}

bool Statement::step() {
  if (!pg_) {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) {
      changes_ = sqlite3_changes(conn_.sqlite_handle());
      return false;
    }
    sqlite_fail(conn_.sqlite_handle(), "step");
  }
  if (!pg_->result) {
    std::vector<const char*> values(pg_->parameters);
    std::vector<int> lengths(pg_->parameters);
    for (int i = 0; i < pg_->parameters; ++i) {
      values[i] = pg_->is_null[i] ? nullptr : pg_->values[i].data();
      lengths[i] = static_cast<int>(pg_->values[i].size());
    }
    PGconn* conn = conn_.postgres_handle();
    const std::string* name = nullptr;
    if (PostgresSession* session = conn_.postgres_session()) {
      std::string key = pg_->sql;
      key.push_back('\0');
      for (Oid type : pg_->types) key += std::to_string(type) + ",";
      auto it = session->prepared.find(key);
      if (it == session->prepared.end() && session->prepared.size() < PostgresSession::kMaxPrepared) {
        std::string fresh = "sbxd" + std::to_string(session->next_name++);
        PGresult* prepared =
            PQprepare(conn, fresh.c_str(), pg_->sql.c_str(), pg_->parameters, pg_->types.data());
        if (PQresultStatus(prepared) != PGRES_COMMAND_OK) {
          std::unique_ptr<PGresult, decltype(&PQclear)> failed(prepared, &PQclear);
          postgres_fail(conn, "prepare", prepared);
        }
        PQclear(prepared);
        it = session->prepared.emplace(std::move(key), std::move(fresh)).first;
      }
      if (it != session->prepared.end()) name = &it->second;
    }
    pg_->result = name ? PQexecPrepared(conn, name->c_str(), pg_->parameters, values.data(), lengths.data(),
                                        pg_->formats.data(), 0)
                       : PQexecParams(conn, pg_->sql.c_str(), pg_->parameters, pg_->types.data(),
                                      values.data(), lengths.data(), pg_->formats.data(), 0);
    auto status = PQresultStatus(pg_->result);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) postgres_fail(conn, "step", pg_->result);
    pg_->rows = PQntuples(pg_->result);
    const char* affected = PQcmdTuples(pg_->result);
    changes_ = affected && *affected ? std::strtoll(affected, nullptr, 10) : 0;
  }
  return ++pg_->row < pg_->rows;
}

void Statement::run() {
  while (step()) {
  }
}

int64_t Statement::integer(int column) const {
  if (!pg_) return sqlite3_column_int64(stmt_, column);
  if (PQgetisnull(pg_->result, pg_->row, column)) return 0;
  const char* value = PQgetvalue(pg_->result, pg_->row, column);
  if (value[0] == 't' && value[1] == '\0') return 1;  // booleans
  if (value[0] == 'f' && value[1] == '\0') return 0;
  return std::strtoll(value, nullptr, 10);
}

std::string Statement::text(int column) const {
  if (!pg_) {
    auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return data ? std::string(data, static_cast<size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
  }
  return std::string(PQgetvalue(pg_->result, pg_->row, column),
                     static_cast<size_t>(PQgetlength(pg_->result, pg_->row, column)));
}

std::string Statement::blob(int column) const {
  if (!pg_) return text(column);
  if (PQgetisnull(pg_->result, pg_->row, column)) return std::string();
  const char* value = PQgetvalue(pg_->result, pg_->row, column);
  size_t size = static_cast<size_t>(PQgetlength(pg_->result, pg_->row, column));
  if (PQftype(pg_->result, column) != kByteaOid) return std::string(value, size);
  return decode_bytea_hex(value, size);
}

bool Statement::is_null(int column) const {
  if (!pg_) return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  return PQgetisnull(pg_->result, pg_->row, column) != 0;
}

// ------------------------------------------------------------------ Transaction

Transaction::Transaction(Connection& conn) : conn_(conn) {
  conn_.exec(conn_.backend() == Backend::kSqlite ? "BEGIN IMMEDIATE" : "BEGIN");
}

Transaction::~Transaction() {
  if (done_) return;
  if (conn_.backend() == Backend::kSqlite) {
    sqlite3_exec(conn_.sqlite_handle(), "ROLLBACK", nullptr, nullptr, nullptr);
  } else {
    PQclear(PQexec(conn_.postgres_handle(), "ROLLBACK"));  // a broken connection is reset on release
  }
}

void Transaction::commit() {
  conn_.exec("COMMIT");
  done_ = true;
}

}  // namespace sandboxd::store::db
