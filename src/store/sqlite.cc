#include "store/sqlite.h"

#include <stdexcept>

namespace sandboxd::store::sqlite {
namespace {
constexpr int kBusyTimeoutMs = 5000;
}

void fail(sqlite3* db, std::string_view what) {
  throw std::runtime_error("sqlite: " + std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK) {
    fail(db, "prepare");
  }
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, std::string_view value) {
  check(sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT));
  return *this;
}

Statement& Statement::bind(int index, int64_t value) {
  check(sqlite3_bind_int64(stmt_, index, value));
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_, "step");
}

void Statement::run() {
  while (step()) {
  }
}

int64_t Statement::integer(int column) const { return sqlite3_column_int64(stmt_, column); }

std::string Statement::text(int column) const {
  auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  return data ? std::string(data, static_cast<size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
}

void Statement::check(int rc) {
  if (rc != SQLITE_OK) fail(db_, "bind");
}

void exec(sqlite3* db, const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db);
    sqlite3_free(message);
    throw std::runtime_error("sqlite: " + text);
  }
}

Transaction::Transaction(sqlite3* db) : db_(db) { exec(db_, "BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  exec(db_, "COMMIT");
  done_ = true;
}

sqlite3* open_database(const std::string& path) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw std::runtime_error("sqlite: cannot open " + path + ": " + message);
  }
  try {
    sqlite3_busy_timeout(db, kBusyTimeoutMs);
    exec(db, "PRAGMA journal_mode = WAL");
    exec(db, "PRAGMA synchronous = NORMAL");
  } catch (...) {
    sqlite3_close(db);
    throw;
  }
  return db;
}

}  // namespace sandboxd::store::sqlite
