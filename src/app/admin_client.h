// The operator's commands, `sandboxd ps` and `sandboxd stop`: clients of a running
// server's admin endpoints (src/api/admin.cc), authenticated with auth.adminToken.
#pragma once

#include <optional>
#include <string>

namespace sandboxd::app {

struct AdminTarget {
  std::string url;    // "http://127.0.0.1:8080"
  std::string token;  // the admin token
};

// Prints the running sandboxes as a table. Returns the exit status.
int admin_ps(const AdminTarget& target);
// Stops a container's sandbox (files kept). Returns the exit status.
int admin_stop(const AdminTarget& target, const std::string& container,
               const std::optional<std::string>& owner);
// Drains the server (POST /admin/drain): waits until it has stopped its sandboxes and
// released its containers. Returns the exit status.
int admin_drain(const AdminTarget& target);

}  // namespace sandboxd::app
