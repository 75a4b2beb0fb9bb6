// The SQLite helpers every store uses (metadata, threads, skills): a prepared statement,
// exec, a write transaction and opening a database in WAL mode. A failure here is a
// broken database or a bug in the SQL, never an expected outcome, so it throws.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace sandboxd::store::sqlite {

// Throws std::runtime_error("<label>: <what>: <sqlite's message>").
[[noreturn]] void fail(sqlite3* db, std::string_view what);

// A prepared statement, finalized on scope exit. bind() takes a 1-based index; add()
// binds the next parameter in order, for SQL assembled from optional pieces.
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, std::string_view value);
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  template <typename T>
  Statement& add(const T& value) {
    return bind(next_index_++, value);
  }

  // True while a row is available.
  bool step();
  // Steps to the end.
  void run();

  int64_t integer(int column) const;
  std::string text(int column) const;

 private:
  void check(int rc);

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int next_index_ = 1;
};

// Runs one or more statements without results.
void exec(sqlite3* db, const char* sql);

// BEGIN IMMEDIATE takes the write lock up front, so a read-then-write sequence never
// fails halfway with SQLITE_BUSY. Rolls back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  sqlite3* db_;
  bool done_ = false;
};

// Opens (creating) a database for use from one thread at a time: WAL journal,
// synchronous = NORMAL, a busy timeout for the other processes and connections.
// Throws when it cannot; the caller owns the handle (sqlite3_close).
sqlite3* open_database(const std::string& path);

}  // namespace sandboxd::store::sqlite
