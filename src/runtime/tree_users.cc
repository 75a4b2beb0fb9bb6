#include "runtime/tree_users.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace sandboxd::runtime {
namespace {

namespace fs = std::filesystem;
using Key = std::pair<dev_t, ino_t>;

std::set<Key> entries_of(const std::string& dir, size_t max_entries) {
  std::set<Key> out;
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return out;
  out.insert({st.st_dev, st.st_ino});
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (out.size() > max_entries) break;
    if (lstat(it->path().c_str(), &st) == 0) out.insert({st.st_dev, st.st_ino});
  }
  return out;
}

// pid1 and all its descendants.
std::vector<pid_t> tree_of(pid_t pid1) {
  std::vector<pid_t> out{pid1};
  std::set<pid_t> seen{pid1};
  for (size_t i = 0; i < out.size() && out.size() < 100000; ++i) {
    const std::string tasks = "/proc/" + std::to_string(out[i]) + "/task";
    DIR* d = opendir(tasks.c_str());
    if (!d) continue;
    while (dirent* entry = readdir(d)) {
      if (entry->d_name[0] == '.') continue;
      std::ifstream children(tasks + "/" + entry->d_name + "/children");
      pid_t child;
      while (children >> child)
        if (seen.insert(child).second) out.push_back(child);
    }
    closedir(d);
  }
  return out;
}

bool uses(pid_t pid, const std::set<Key>& entries) {
  const std::string proc = "/proc/" + std::to_string(pid);
  auto inside = [&entries](const std::string& link) {
    struct stat st {};
    return stat(link.c_str(), &st) == 0 && entries.contains({st.st_dev, st.st_ino});
  };
  if (inside(proc + "/cwd") || inside(proc + "/root")) return true;
  for (const char* folder : {"/fd", "/map_files"}) {
    DIR* d = opendir((proc + folder).c_str());
    if (!d) continue;
    bool found = false;
    while (dirent* entry = readdir(d)) {
      if (entry->d_name[0] == '.') continue;
      if (inside(proc + folder + "/" + entry->d_name)) {
        found = true;
        break;
      }
    }
    closedir(d);
    if (found) return true;
  }
  return false;
}

}  // namespace

int kill_tree_users(pid_t pid1, const std::string& dir, size_t max_entries) {
  if (pid1 <= 0) return 0;
  const auto entries = entries_of(dir, max_entries);
  if (entries.empty()) return 0;
  int killed = 0;
  for (pid_t pid : tree_of(pid1)) {
    if (pid == pid1) continue;  // the sandbox's init never enters a skill's folder
    if (uses(pid, entries) && kill(pid, SIGKILL) == 0) ++killed;
  }
  return killed;
}

}  // namespace sandboxd::runtime
