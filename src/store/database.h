// The metadata database behind every store (metadata, threads, skills, ...), on either
// backend: SQLite (one file, the single-host default) or PostgreSQL (shared by replicas).
// The API is that of a plain SQLite statement wrapper, with a connection in place of the
// sqlite3 handle, so a store is written once:
//
//   auto conn = db_->acquire();                   // was: std::lock_guard lock(mutex_)
//   Transaction transaction(conn);                // BEGIN IMMEDIATE | BEGIN
//   Statement query(conn, "SELECT a FROM t WHERE k = ?");
//   query.add(key);
//   while (query.step()) use(query.integer(0), query.text(1));
//   query.changes();                              // was: sqlite3_changes(db)
//   transaction.commit();
//
// SQL uses `?` placeholders (numbered $1..$n for PostgreSQL, outside quotes) and the
// dialects' common subset: ON CONFLICT ... DO UPDATE/NOTHING, RETURNING, row values.
// Byte strings that need not be UTF-8 (sandbox paths, names from outside) go through
// bind_blob()/blob(): SQLite keeps them as TEXT bytes (what it always stored, compared
// by memcmp), PostgreSQL as BYTEA (byte order, any bytes); PostgreSQL TEXT must be UTF-8.
// Every failure throws std::runtime_error("<backend>: <call>: <server's message>"): a
// broken database or a bug, never an expected outcome (callers answer a generic 500).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;
struct pg_conn;

namespace sandboxd::store::db {

enum class Backend { kSqlite, kPostgres };

class Connection;
struct SqliteStatementCache;  // database.cc

// The statements prepared on one PostgreSQL connection, by their SQL and parameter
// types: each runs again without being parsed and planned again (one round trip, as
// before, and less of the server's time). Bounded: SQL assembled from a varying number
// of pieces beyond that runs unprepared. Emptied when the connection is made anew.
struct PostgresSession {
  static constexpr size_t kMaxPrepared = 256;
  std::unordered_map<std::string, std::string> prepared;  // key -> statement name
  uint64_t next_name = 0;
};

// A database: one SQLite file, or a pool of PostgreSQL connections. Thread-safe; a
// store keeps a shared_ptr and acquires a connection for each unit of work.
class Database {
 public:
  virtual ~Database() = default;
  Backend backend() const { return backend_; }
  // SQLite: the one connection, held under a mutex until the lease ends (as each store
  // always did). PostgreSQL: a pooled connection (waits while all are in use), checked
  // and reconnected when the server dropped it. Throws when it cannot connect.
  // One lease per thread at a time: a second acquire() while holding one waits forever
  // on SQLite (as the stores' mutex always did).
  virtual Connection acquire() = 0;

 protected:
  explicit Database(Backend backend) : backend_(backend) {}

 private:
  friend class Connection;
  virtual void release(pg_conn* conn, PostgresSession* session) = 0;
  Backend backend_;
};

// A statement the database gave up on because it waited too long: for a lock another
// session holds (PostgreSQL's lock_timeout, SQLite's busy timeout) or in all
// (statement_timeout). Nothing was changed; the same call may succeed later, once the
// other session lets go.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Opens (creating) a SQLite database: WAL journal, synchronous = NORMAL, a busy timeout
// for the other connections and processes.
std::shared_ptr<Database> open_sqlite(const std::string& path);

// Bounds on every wait of a PostgreSQL session, set on each connection: no call of
// sandboxd waits on the database for longer than these, whatever another session
// (a paused replica, a forgotten psql) holds. Zero turns one off.
struct PostgresTimeouts {
  // A statement waiting for a row or table lock gives up (TimeoutError) after this.
  std::chrono::milliseconds lock = std::chrono::seconds(5);
  // Any statement gives up after this, lock waits included.
  std::chrono::milliseconds statement = std::chrono::seconds(30);
  // The server ends a session of ours left idle inside a transaction for this long (its
  // process paused or cut off mid-transaction), and with it the locks it held.
  std::chrono::milliseconds idle_in_transaction = std::chrono::seconds(10);
};

// A pool of at most `max_connections` to the server at `url` (a libpq URL or
// "key=value" string); connects once right away so a wrong URL fails at start. Every
// connection has TCP keepalives on (a server that vanished is noticed in about 30 s)
// and `timeouts` set.
std::shared_ptr<Database> open_postgres(const std::string& url, size_t max_connections = 8,
                                        PostgresTimeouts timeouts = {});

// A leased connection: returned to its database at scope end. Movable, not copyable.
class Connection {
 public:
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&&) = delete;
  Connection(const Connection&) = delete;
  ~Connection();

  Backend backend() const { return backend_; }
  // Runs one or more statements without parameters or results (DDL, PRAGMA).
  void exec(std::string_view sql);

  sqlite3* sqlite_handle() const { return sqlite_; }
  pg_conn* postgres_handle() const { return postgres_; }
  PostgresSession* postgres_session() const { return session_; }

 private:
  friend class SqliteDatabase;
  friend class PostgresDatabase;
  friend class Statement;
  Connection(Backend backend, sqlite3* sqlite, std::unique_lock<std::mutex> lock,
             SqliteStatementCache* statements)
      : backend_(backend), sqlite_(sqlite), sqlite_lock_(std::move(lock)), sqlite_statements_(statements) {}
  Connection(Database* owner, pg_conn* conn, PostgresSession* session)
      : backend_(Backend::kPostgres), postgres_(conn), session_(session), owner_(owner) {}

  Backend backend_;
  sqlite3* sqlite_ = nullptr;
  std::unique_lock<std::mutex> sqlite_lock_;
  SqliteStatementCache* sqlite_statements_ = nullptr;  // the database's, used under sqlite_lock_
  pg_conn* postgres_ = nullptr;
  PostgresSession* session_ = nullptr;
  Database* owner_ = nullptr;
};

struct PostgresQuery;  // database.cc

// A statement, finished on scope exit. bind() takes a 1-based index; add() binds the
// next parameter in order, for SQL assembled from optional pieces.
class Statement {
 public:
  Statement(Connection& conn, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, std::string_view value);
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  // Bytes that need not be UTF-8 (BYTEA in PostgreSQL; TEXT bytes in SQLite).
  Statement& bind_blob(int index, std::string_view value);
  template <typename T>
  Statement& add(const T& value) {
    return bind(next_index_++, value);
  }
  Statement& add_blob(std::string_view value) { return bind_blob(next_index_++, value); }

  // True while a row is available.
  bool step();
  // Steps to the end.
  void run();

  // NULL reads as 0 / "".
  int64_t integer(int column) const;
  std::string text(int column) const;
  std::string blob(int column) const;
  bool is_null(int column) const;
  // Rows inserted, updated or deleted, once the statement has run to its end.
  int64_t changes() const { return changes_; }

 private:
  Connection& conn_;
  sqlite3_stmt* stmt_ = nullptr;
  bool* cached_in_use_ = nullptr;  // a statement of the connection's cache, given back at scope exit
  std::unique_ptr<PostgresQuery> pg_;
  int next_index_ = 1;
  int64_t changes_ = 0;
};

// A write transaction, rolled back unless committed. SQLite: BEGIN IMMEDIATE (the write
// lock up front, so a read-then-write never fails halfway with SQLITE_BUSY).
// PostgreSQL: BEGIN (READ COMMITTED; writes take row locks as they go).
class Transaction {
 public:
  explicit Transaction(Connection& conn);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Connection& conn_;
  bool done_ = false;
};

// `?` placeholders numbered $1..$n for PostgreSQL, leaving quoted text alone; the
// count of placeholders in `count`.
std::string number_placeholders(std::string_view sql, int& count);

}  // namespace sandboxd::store::db
