#include "runtime/spec.h"

#include <charconv>
#include <stdexcept>

namespace sandboxd::runtime {
namespace {

void put(std::string& out, std::string_view key, std::string_view value) {
  // Values are paths and names chosen by sandboxd itself; a newline in one would let it
  // forge another key, so it is refused rather than escaped.
  if (value.find('\n') != std::string_view::npos || value.find('\0') != std::string_view::npos)
    throw std::invalid_argument("sandbox spec value for " + std::string(key) + " contains a newline or NUL");
  out.append(key).append("=").append(value).append("\n");
}

bool parse_u64(std::string_view text, uint64_t& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

std::string to_hex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

bool from_hex(std::string_view hex, std::string& out) {
  if (hex.size() % 2) return false;
  auto value = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  out.clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = value(hex[i]), lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

const char* kill_method_name(KillMethod m) {
  switch (m) {
    case KillMethod::kCgroupKill:
      return "cgroup.kill";
    case KillMethod::kFreezer:
      return "freezer";
    case KillMethod::kSignalLoop:
      return "signal";
  }
  return "signal";
}

}  // namespace

std::string encode(const Spec& spec) {
  std::string out;
  put(out, "image_root", spec.image_root);
  put(out, "workspace_dir", spec.workspace_dir);
  put(out, "uploads_dir", spec.uploads_dir);
  put(out, "outputs_dir", spec.outputs_dir);
  put(out, "skills_dir", spec.skills_dir);
  put(out, "host_uid", std::to_string(spec.host_uid));
  put(out, "host_gid", std::to_string(spec.host_gid));
  put(out, "tmp_size_bytes", std::to_string(spec.tmp_size_bytes));
  put(out, "home_size_bytes", std::to_string(spec.home_size_bytes));
  put(out, "shm_size_bytes", std::to_string(spec.shm_size_bytes));
  put(out, "max_open_files", std::to_string(spec.max_open_files));
  put(out, "hostname", spec.hostname);
  for (const auto& dir : spec.cgroup_dirs) put(out, "cgroup_dir", dir);
  put(out, "exec_cgroup_parent", spec.exec_cgroup_parent);
  put(out, "kill_method", kill_method_name(spec.kill_method));
  for (const auto& line : spec.hosts_entries) put(out, "hosts_entry", line);
  for (const auto& listener : spec.listeners)
    put(out, "listener", listener.address + " " + std::to_string(listener.port));
  if (!spec.nameserver.empty()) put(out, "nameserver", spec.nameserver);
  if (!spec.trust_dir.empty()) put(out, "trust_dir", spec.trust_dir);
  put(out, "seccomp_bpf", to_hex(spec.seccomp_bpf));
  put(out, "receive_mounts", spec.receive_mounts ? "1" : "0");
  put(out, "mount_trees", spec.mount_trees ? "1" : "0");
  return out;
}

std::string decode(std::string_view payload, Spec& out) {
  out = Spec{};
  while (!payload.empty()) {
    auto eol = payload.find('\n');
    if (eol == std::string_view::npos) return "unterminated line";
    std::string_view line = payload.substr(0, eol);
    payload.remove_prefix(eol + 1);
    auto eq = line.find('=');
    if (eq == std::string_view::npos) return "line without '='";
    std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    uint64_t number = 0;
    auto need_number = [&]() { return parse_u64(value, number); };
    if (key == "image_root")
      out.image_root = value;
    else if (key == "workspace_dir")
      out.workspace_dir = value;
    else if (key == "uploads_dir")
      out.uploads_dir = value;
    else if (key == "outputs_dir")
      out.outputs_dir = value;
    else if (key == "skills_dir")
      out.skills_dir = value;
    else if (key == "hostname")
      out.hostname = value;
    else if (key == "cgroup_dir")
      out.cgroup_dirs.emplace_back(value);
    else if (key == "exec_cgroup_parent")
      out.exec_cgroup_parent = value;
    else if (key == "hosts_entry")
      out.hosts_entries.emplace_back(value);
    else if (key == "nameserver")
      out.nameserver = value;
    else if (key == "trust_dir")
      out.trust_dir = value;
    else if (key == "listener") {
      auto space = value.find(' ');
      if (space == std::string_view::npos || !parse_u64(value.substr(space + 1), number) || number == 0 ||
          number > 65535)
        return "bad listener";
      out.listeners.push_back({std::string(value.substr(0, space)), static_cast<uint16_t>(number)});
      if (out.listeners.size() > kMaxListeners) return "too many listeners";
    } else if (key == "receive_mounts") {
      if (value != "0" && value != "1") return "bad receive_mounts";
      out.receive_mounts = value == "1";
    } else if (key == "mount_trees") {
      if (value != "0" && value != "1") return "bad mount_trees";
      out.mount_trees = value == "1";
    } else if (key == "seccomp_bpf") {
      if (!from_hex(value, out.seccomp_bpf)) return "bad seccomp_bpf";
    } else if (key == "kill_method") {
      if (value == "cgroup.kill")
        out.kill_method = KillMethod::kCgroupKill;
      else if (value == "freezer")
        out.kill_method = KillMethod::kFreezer;
      else if (value == "signal")
        out.kill_method = KillMethod::kSignalLoop;
      else
        return "bad kill_method";
    } else if (key == "host_uid" || key == "host_gid" || key == "tmp_size_bytes" ||
               key == "home_size_bytes" || key == "shm_size_bytes" || key == "max_open_files") {
      if (!need_number()) return "bad number for " + std::string(key);
      if (key == "host_uid")
        out.host_uid = static_cast<uint32_t>(number);
      else if (key == "host_gid")
        out.host_gid = static_cast<uint32_t>(number);
      else if (key == "tmp_size_bytes")
        out.tmp_size_bytes = number;
      else if (key == "home_size_bytes")
        out.home_size_bytes = number;
      else if (key == "shm_size_bytes")
        out.shm_size_bytes = number;
      else
        out.max_open_files = number;
    } else {
      return "unknown key " + std::string(key);
    }
  }
  if (out.workspace_dir.empty() || out.uploads_dir.empty() || out.outputs_dir.empty())
    return "workspace, uploads and outputs directories are required";
  if (out.host_uid == 0 || out.host_gid == 0) return "host uid/gid 0 is not allowed";
  if (out.seccomp_bpf.empty() || out.seccomp_bpf.size() % 8) return "a seccomp filter is required";
  return "";
}

}  // namespace sandboxd::runtime
