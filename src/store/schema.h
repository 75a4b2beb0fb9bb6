// The metadata database's schema, for both backends, as numbered migrations: every
// table of every store (containers, files, threads, skills, ...) is made and changed
// here, nowhere else. A database records what it has in schema_migrations (SQLite also
// in PRAGMA user_version, which older sandboxd versions check before they touch it).
//
// Adding a change: append a Migration with the next version and its SQL in both
// dialects (PostgreSQL: BIGINT for integers, BYTEA for byte strings read with blob(),
// TEXT COLLATE "C" for text that is compared or ordered, so the order is SQLite's byte
// order). Never edit a migration that has shipped.
#pragma once

#include <vector>

#include "store/database.h"

namespace sandboxd::store::schema {

struct Migration {
  int version;
  const char* description;
  const char* sqlite;
  const char* postgres;
};

const std::vector<Migration>& migrations();

// Brings the database up to the newest migration; returns how many this call applied.
// Runs under a lock so that two processes starting at once never both migrate:
// PostgreSQL's pg_advisory_lock, SQLite's write lock (BEGIN IMMEDIATE). Throws when the
// database is newer than this sandboxd (a downgrade) or a migration fails (that
// migration is rolled back whole).
int migrate(db::Database& database);

}  // namespace sandboxd::store::schema
