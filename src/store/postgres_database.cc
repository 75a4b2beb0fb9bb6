// The PostgreSQL side of store/database.h: a small pool of libpq connections. Each
// connection serves one lease at a time; a connection the server dropped (a restart, a
// failover, an idle timeout) is noticed before it is handed out and reconnected, so a
// restarted database costs no failed request.
#include <libpq-fe.h>
#include <poll.h>

#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "store/database.h"

namespace sandboxd::store::db {
namespace {

std::string trimmed(const char* message) {
  std::string text = message ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Settings every connection gets, whatever the server's defaults: BYTEA in hex (what
// Statement::blob decodes), UTC (nothing here depends on it, but a session never
// should on the server's zone) and the bounds on its waits (PostgresTimeouts). UTF-8
// text is a connection parameter.
std::string session_setup(const PostgresTimeouts& timeouts) {
  auto ms = [](std::chrono::milliseconds value) { return "'" + std::to_string(value.count()) + "ms'"; };
  return "SET bytea_output = 'hex'; SET TIME ZONE 'UTC'; SET lock_timeout = " + ms(timeouts.lock) +
         "; SET statement_timeout = " + ms(timeouts.statement) +
         "; SET idle_in_transaction_session_timeout = " + ms(timeouts.idle_in_transaction);
}

}  // namespace

class PostgresDatabase final : public Database {
 public:
  PostgresDatabase(std::string url, size_t max_connections, const PostgresTimeouts& timeouts)
      : Database(Backend::kPostgres),
        url_(std::move(url)),
        max_(std::max<size_t>(1, max_connections)),
        setup_(session_setup(timeouts)) {
    // One connection right away: a wrong URL or an unreachable server fails the start.
    PGconn* first = connect();
    idle_.push_back(first);
    sessions_[first] = std::make_unique<PostgresSession>();
    open_ = 1;
  }

  ~PostgresDatabase() override {
    for (PGconn* conn : idle_) PQfinish(conn);
  }

  Connection acquire() override {
    PGconn* conn = nullptr;
    PostgresSession* session = nullptr;
    {
      std::unique_lock lock(mutex_);
      available_.wait(lock, [&] { return !idle_.empty() || open_ < max_; });
      if (!idle_.empty()) {
        conn = idle_.back();
        idle_.pop_back();
      } else {
        ++open_;
      }
    }
    try {
      if (!conn) {
        conn = connect();
        std::lock_guard lock(mutex_);
        session = (sessions_[conn] = std::make_unique<PostgresSession>()).get();
      } else {
        {
          std::lock_guard lock(mutex_);
          session = sessions_.at(conn).get();
        }
        ensure_alive(conn, *session);
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (conn) {  // it could not be reconnected: closed
        PQfinish(conn);
        sessions_.erase(conn);
      }
      --open_;
      available_.notify_one();
      throw;
    }
    return Connection(this, conn, session);
  }

 private:
  PGconn* connect() {
    // connect_timeout and the keepalives first: a value in the URL overrides them (later
    // keywords win). A server (or the path to it) that vanishes mid-call would otherwise
    // leave the call waiting for the kernel's TCP timeouts, hours: idle 10 s, then 3
    // probes 5 s apart, and at most 30 s for data the server does not acknowledge.
    const char* keywords[] = {
        "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval", "keepalives_count",
        "tcp_user_timeout", "application_name", "dbname",          "client_encoding",     nullptr};
    const char* values[] = {"10", "1", "10", "5", "3", "30000", "sandboxd", url_.c_str(), "UTF8", nullptr};
    PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
    if (!conn) throw std::runtime_error("postgres: connect: out of memory");
    if (PQstatus(conn) != CONNECTION_OK) {
      std::string message = trimmed(PQerrorMessage(conn));
      PQfinish(conn);
      throw std::runtime_error("postgres: connect: " + message);
    }
    try {
      setup(conn);
    } catch (...) {
      PQfinish(conn);
      throw;
    }
    return conn;
  }

  void setup(PGconn* conn) const {
    PGresult* result = PQexec(conn, setup_.c_str());
    bool ok = PQresultStatus(result) == PGRES_COMMAND_OK;
    std::string message = ok ? "" : trimmed(PQresultErrorMessage(result));
    PQclear(result);
    if (!ok) throw std::runtime_error("postgres: session setup: " + message);
  }

  // An idle connection has nothing to read; if its socket is readable the server has
  // closed it (or said why it will): read that, and reconnect when it is gone.
  // A connection made anew has none of the old one's prepared statements.
  void ensure_alive(PGconn* conn, PostgresSession& session) const {
    if (PQstatus(conn) == CONNECTION_OK) {
      pollfd fd{PQsocket(conn), POLLIN, 0};
      if (fd.fd >= 0 && poll(&fd, 1, 0) > 0) PQconsumeInput(conn);
    }
    if (PQstatus(conn) == CONNECTION_OK) return;
    session.prepared.clear();
    PQreset(conn);
    if (PQstatus(conn) != CONNECTION_OK)
      throw std::runtime_error("postgres: reconnect: " + trimmed(PQerrorMessage(conn)));
    setup(conn);
  }

  // A connection comes back idle (outside any transaction) or is closed: a lease that
  // ended in the middle of a transaction (an exception) must not hand it to the next.
  void release(pg_conn* conn, PostgresSession*) override {
    if (PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) != PQTRANS_IDLE)
      PQclear(PQexec(conn, "ROLLBACK"));
    bool reusable = PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) == PQTRANS_IDLE;
    if (!reusable) PQfinish(conn);
    std::lock_guard lock(mutex_);
    if (reusable) {
      idle_.push_back(conn);
    } else {
      sessions_.erase(conn);
      --open_;
    }
    available_.notify_one();
  }

  const std::string url_;
  const size_t max_;
  const std::string setup_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<PGconn*> idle_;
  std::unordered_map<PGconn*, std::unique_ptr<PostgresSession>> sessions_;  // every open connection's
  size_t open_ = 0;                                                         // idle + leased
};

std::shared_ptr<Database> open_postgres(const std::string& url, size_t max_connections,
                                        PostgresTimeouts timeouts) {
  return std::make_shared<PostgresDatabase>(url, max_connections, timeouts);
}

}  // namespace sandboxd::store::db
