#include "images/import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <map>

#include "runtime/syscall_error.h"

namespace sandboxd::images {
namespace {

namespace json = boost::json;
using runtime::SyscallError;

// The outer tarball's regular files, copied out under neutral names (never the
// archive's), so that layers can be read in the order the manifest gives.
class Unpacked {
 public:
  Unpacked(std::string dir) : dir_(std::move(dir)) {
    if (mkdir(dir_.c_str(), 0700) != 0) throw SyscallError("mkdir(" + dir_ + ", 0700)", errno);
  }

  void read_all(const std::string& file) {
    FileSource raw(file);
    DecompressingSource source(raw, file);
    TarReader tar(source, file);
    TarEntry entry;
    std::vector<std::pair<std::string, std::string>> links;  // path -> target path
    while (tar.next(entry)) {
      std::vector<std::string> parts;
      if (!clean_path(entry.path, parts) || parts.empty()) continue;
      std::string path = join_path(parts);
      if (entry.type == EntryType::kFile) {
        std::string staged = dir_ + "/" + std::to_string(files_.size());
        copy_out(tar, staged);
        files_[path] = staged;
      } else if (entry.type == EntryType::kSymlink) {
        // Older `docker save` links a layer shared by two images: "../<id>/layer.tar".
        std::string target = entry.link_target[0] == '/'
                                 ? entry.link_target
                                 : path.substr(0, path.rfind('/') + 1) + entry.link_target;
        links.emplace_back(path, target);
      } else if (entry.type == EntryType::kHardlink) {
        links.emplace_back(path, entry.link_target);
      }
    }
    for (const auto& [path, target] : links) {
      std::vector<std::string> parts;
      if (!split_path(target, DotDot::kFailAboveRoot, parts)) continue;
      if (auto it = files_.find(join_path(parts)); it != files_.end()) files_[path] = it->second;
    }
  }

  // The staged copy of an archive path, or empty.
  std::string find(const std::string& path) const {
    std::vector<std::string> parts;
    if (!clean_path(path, parts)) return {};
    auto it = files_.find(join_path(parts));
    return it == files_.end() ? std::string() : it->second;
  }

  std::string read_small(const std::string& path, const char* what) const {
    std::string staged = find(path);
    if (staged.empty()) throw ImageError(std::string(what) + " (" + path + ") is not in the tarball");
    struct stat st;
    if (stat(staged.c_str(), &st) != 0) throw SyscallError("stat(" + staged + ")", errno);
    if (st.st_size > (16 << 20))
      throw ImageError(std::string(what) + " (" + path + ") is larger than 16 MiB");
    FileSource source(staged);
    std::string text(static_cast<size_t>(st.st_size), '\0');
    if (!source.read_full(text.data(), text.size())) throw ImageError(path + " changed while being read");
    return text;
  }

 private:
  void copy_out(TarReader& tar, const std::string& staged) {
    int fd = open(staged.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw SyscallError("open(" + staged + ", O_CREAT|O_EXCL)", errno);
    char buf[1 << 16];
    while (size_t got = tar.read(buf, sizeof buf)) {
      if (write(fd, buf, got) != static_cast<ssize_t>(got)) {
        int err = errno;
        close(fd);
        throw SyscallError("write(" + staged + ")", err);
      }
    }
    close(fd);
  }

  std::string dir_;
  std::map<std::string, std::string> files_;
};

json::value parse_json(const std::string& text, const std::string& what) {
  boost::system::error_code ec;
  auto value = json::parse(text, ec);
  if (ec) throw ImageError(what + " is not valid JSON: " + ec.message());
  return value;
}

const json::object& as_object(const json::value& v, const std::string& what) {
  if (!v.is_object()) throw ImageError(what + " is not a JSON object");
  return v.as_object();
}

std::string string_at(const json::object& o, const char* key, const std::string& what) {
  auto* v = o.if_contains(key);
  if (!v || !v->is_string()) throw ImageError(what + " has no \"" + key + "\" string");
  return std::string(v->as_string());
}

// "sha256:<64 hex>" -> the hex; anything else is refused.
std::string sha256_of_digest(const std::string& digest, const std::string& what) {
  static const std::string kPrefix = "sha256:";
  std::string hex = digest.rfind(kPrefix, 0) == 0 ? digest.substr(kPrefix.size()) : "";
  bool ok = hex.size() == 64 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!ok) throw ImageError(what + ": digest \"" + digest + "\" is not sha256:<64 hex digits>");
  return hex;
}

// "blobs/sha256/<hex>" (OCI, and `docker save` since Docker 25) -> the hex; else empty.
std::string digest_in_blob_path(const std::string& path) {
  std::vector<std::string> parts;
  if (!clean_path(path, parts) || parts.size() != 3 || parts[0] != "blobs" || parts[1] != "sha256") return {};
  return parts[2].size() == 64 ? parts[2] : std::string();
}

std::string oci_blob_path(const std::string& hex) { return "blobs/sha256/" + hex; }

std::string host_architecture() {
  utsname u{};
  uname(&u);
  std::string machine = u.machine;
  if (machine == "x86_64") return "amd64";
  if (machine == "aarch64") return "arm64";
  return machine;
}

// A small blob, checked against the digest (and size) its descriptor gives.
std::string read_verified_blob(const Unpacked& files, const json::object& descriptor,
                               const std::string& what) {
  std::string hex = sha256_of_digest(string_at(descriptor, "digest", what), what);
  std::string text = files.read_small(oci_blob_path(hex), what.c_str());
  if (sha256_hex(text) != hex)
    throw ImageError(what + ": blob sha256:" + hex +
                     " does not match its digest (sha256:" + sha256_hex(text) + ")");
  if (auto* size = descriptor.if_contains("size");
      size && size->is_number() && size->to_number<uint64_t>() != text.size())
    throw ImageError(what + ": blob sha256:" + hex + " has " + std::to_string(text.size()) +
                     " bytes, its descriptor says " + std::to_string(size->to_number<uint64_t>()));
  return text;
}

struct Layer {
  std::string path;              // in the tarball
  std::string compressed_hex;    // expected sha256 of the stored blob, when known
  std::optional<uint64_t> size;  // expected size of the stored blob, when known
  std::string diff_id_hex;       // expected sha256 of the uncompressed tar, when known
};

struct Plan {
  std::string format;
  std::string config_hex;  // the image id
  json::object config;
  std::vector<Layer> layers;
  std::optional<std::string> name_in_archive;  // "name:tag" or just a tag
};

void attach_diff_ids(Plan& plan) {
  auto* rootfs = plan.config.if_contains("rootfs");
  auto* ids = rootfs && rootfs->is_object() ? rootfs->as_object().if_contains("diff_ids") : nullptr;
  if (!ids || !ids->is_array()) throw ImageError("the image config has no rootfs.diff_ids");
  if (ids->as_array().size() != plan.layers.size())
    throw ImageError("the image config lists " + std::to_string(ids->as_array().size()) +
                     " layers (rootfs.diff_ids), the manifest " + std::to_string(plan.layers.size()));
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const auto& id = ids->as_array()[i];
    if (!id.is_string()) throw ImageError("rootfs.diff_ids holds a non-string");
    plan.layers[i].diff_id_hex = sha256_of_digest(std::string(id.as_string()), "rootfs.diff_ids");
  }
}

Plan plan_docker_save(const Unpacked& files) {
  Plan plan;
  plan.format = "docker-save";
  auto manifest = parse_json(files.read_small("manifest.json", "manifest.json"), "manifest.json");
  if (!manifest.is_array() || manifest.as_array().empty()) throw ImageError("manifest.json lists no image");
  const auto& image = as_object(manifest.as_array()[0], "manifest.json[0]");
  std::string config_path = string_at(image, "Config", "manifest.json[0]");
  std::string config_text = files.read_small(config_path, "the image config");
  // The config's file name is its digest: "<hex>.json" (classic) or blobs/sha256/<hex>.
  plan.config_hex = sha256_hex(config_text);
  std::string named = digest_in_blob_path(config_path);
  if (named.empty() && config_path.size() == 69 && config_path.substr(64) == ".json")
    named = config_path.substr(0, 64);
  if (!named.empty() && named != plan.config_hex)
    throw ImageError("the image config " + config_path +
                     " does not match its digest (sha256:" + plan.config_hex + ")");
  plan.config = as_object(parse_json(config_text, config_path), config_path);
  auto* layers = image.if_contains("Layers");
  if (!layers || !layers->is_array()) throw ImageError("manifest.json[0] has no Layers");
  for (const auto& l : layers->as_array()) {
    if (!l.is_string()) throw ImageError("manifest.json[0].Layers holds a non-string");
    Layer layer;
    layer.path = std::string(l.as_string());
    layer.compressed_hex = digest_in_blob_path(layer.path);
    plan.layers.push_back(layer);
  }
  if (auto* tags = image.if_contains("RepoTags");
      tags && tags->is_array() && !tags->as_array().empty() && tags->as_array()[0].is_string())
    plan.name_in_archive = std::string(tags->as_array()[0].as_string());
  attach_diff_ids(plan);
  return plan;
}

Plan plan_oci(const Unpacked& files) {
  Plan plan;
  plan.format = "oci";
  auto layout =
      as_object(parse_json(files.read_small("oci-layout", "oci-layout"), "oci-layout"), "oci-layout");
  if (string_at(layout, "imageLayoutVersion", "oci-layout") != "1.0.0")
    throw ImageError("oci-layout: imageLayoutVersion is not 1.0.0");
  auto index_value = parse_json(files.read_small("index.json", "index.json"), "index.json");
  json::object index = as_object(index_value, "index.json");
  // Down through nested indexes (multi-platform images) to a manifest for this host.
  for (int depth = 0;; ++depth) {
    auto* manifests = index.if_contains("manifests");
    if (!manifests || !manifests->is_array() || manifests->as_array().empty())
      throw ImageError("the image index lists no manifest");
    const json::object* chosen = nullptr;
    for (const auto& m : manifests->as_array()) {
      const auto& d = as_object(m, "an index entry");
      auto* platform = d.if_contains("platform");
      if (platform && platform->is_object()) {
        auto* arch = platform->as_object().if_contains("architecture");
        if (arch && arch->is_string() && arch->as_string() != host_architecture()) continue;
      }
      chosen = &d;
      break;
    }
    if (!chosen) throw ImageError("the image index has no manifest for " + host_architecture());
    if (!plan.name_in_archive) {
      if (auto* ann = chosen->if_contains("annotations"); ann && ann->is_object()) {
        for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"})
          if (auto* v = ann->as_object().if_contains(key); v && v->is_string()) {
            plan.name_in_archive = std::string(v->as_string());
            break;
          }
      }
    }
    std::string media = chosen->if_contains("mediaType") && chosen->at("mediaType").is_string()
                            ? std::string(chosen->at("mediaType").as_string())
                            : "";
    std::string text = read_verified_blob(files, *chosen, "a manifest");
    json::object doc = as_object(parse_json(text, "a manifest"), "a manifest");
    bool is_index = media.find("index") != std::string::npos ||
                    media.find("manifest.list") != std::string::npos ||
                    (doc.if_contains("manifests") && !doc.if_contains("layers"));
    if (is_index) {
      if (depth >= 4) throw ImageError("image indexes nested more than 4 deep");
      index = std::move(doc);
      continue;
    }
    auto* config = doc.if_contains("config");
    if (!config || !config->is_object()) throw ImageError("the manifest has no config descriptor");
    std::string config_text = read_verified_blob(files, config->as_object(), "the image config");
    plan.config_hex =
        sha256_of_digest(string_at(config->as_object(), "digest", "the config descriptor"), "config");
    plan.config = as_object(parse_json(config_text, "the image config"), "the image config");
    auto* layers = doc.if_contains("layers");
    if (!layers || !layers->is_array()) throw ImageError("the manifest has no layers");
    for (const auto& l : layers->as_array()) {
      const auto& d = as_object(l, "a layer descriptor");
      Layer layer;
      layer.compressed_hex =
          sha256_of_digest(string_at(d, "digest", "a layer descriptor"), "a layer descriptor");
      layer.path = oci_blob_path(layer.compressed_hex);
      if (auto* size = d.if_contains("size"); size && size->is_number())
        layer.size = size->to_number<uint64_t>();
      plan.layers.push_back(layer);
    }
    break;
  }
  attach_diff_ids(plan);
  return plan;
}

void apply_layer(const Unpacked& files, const Layer& layer, size_t number, size_t count, int root_fd,
                 ExtractReport& report, FILE* progress) {
  std::string what =
      "layer " + std::to_string(number) + "/" + std::to_string(count) + " (" + layer.path + ")";
  std::string staged = files.find(layer.path);
  if (staged.empty()) throw ImageError(what + " is not in the tarball");
  ExtractReport before = report;
  FileSource raw(staged);
  HashingSource stored(raw);
  DecompressingSource plain(stored, what);
  HashingSource uncompressed(plain);
  TarReader tar(uncompressed, what);
  LayerExtractor(root_fd, report, what).apply(tar);
  // The digests cover the whole blob: what follows the tar's end blocks too.
  uncompressed.drain();
  stored.drain();
  if (!layer.compressed_hex.empty() && stored.hex_digest() != layer.compressed_hex)
    throw ImageError(what + " does not match its digest sha256:" + layer.compressed_hex);
  if (layer.size && *layer.size != stored.bytes())
    throw ImageError(what + " has " + std::to_string(stored.bytes()) + " bytes, its descriptor says " +
                     std::to_string(*layer.size));
  if (!layer.diff_id_hex.empty() && uncompressed.hex_digest() != layer.diff_id_hex)
    throw ImageError(what + " does not match the config's diff_id sha256:" + layer.diff_id_hex);
  std::fprintf(
      progress, "  %s%s: %lu files, %lu dirs, %lu symlinks, %lu hardlinks, %lu whiteouts, %s; digest ok\n",
      what.c_str(), plain.gzip() ? " gzip" : "", (unsigned long)(report.files - before.files),
      (unsigned long)(report.directories - before.directories),
      (unsigned long)(report.symlinks - before.symlinks),
      (unsigned long)(report.hardlinks - before.hardlinks),
      (unsigned long)(report.whiteouts - before.whiteouts), human_size(report.bytes - before.bytes).c_str());
  std::fflush(progress);
}

}  // namespace

ImportResult import_image(ImageStore& store, const ImportOptions& options) {
  FILE* progress = options.progress;
  auto staging = store.stage();
  std::fprintf(progress, "reading %s\n", options.file.c_str());
  std::fflush(progress);
  Unpacked files(staging->dir() + "/archive");
  files.read_all(options.file);

  Plan plan;
  if (!files.find("oci-layout").empty() && !files.find("index.json").empty() &&
      files.find("manifest.json").empty())
    plan = plan_oci(files);
  else if (!files.find("manifest.json").empty())
    plan = plan_docker_save(files);
  else
    throw ImageError(options.file +
                     " is neither a `docker save` tarball (manifest.json) nor an OCI image layout "
                     "(oci-layout, index.json)");

  ImageRef ref;
  if (options.name) {
    ref = *options.name;
  } else if (plan.name_in_archive && plan.name_in_archive->find_first_of("/:") != std::string::npos) {
    std::string name = *plan.name_in_archive;
    if (name.rfind("docker.io/library/", 0) == 0) name = name.substr(18);  // as docker shows it
    ref = parse_ref(name);
  } else {
    throw ImageError(options.file +
                     " names no image (no RepoTags or ref annotation); give one with --name NAME[:TAG]");
  }
  std::fprintf(progress, "%s image sha256:%s, %zu layer(s) -> %s\n", plan.format.c_str(),
               plan.config_hex.c_str(), plan.layers.size(), ref.str().c_str());
  std::fflush(progress);

  int root_fd = open(staging->rootfs().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) throw SyscallError("open(" + staging->rootfs() + ", O_DIRECTORY)", errno);
  ImportResult result;
  result.format = plan.format;
  try {
    for (size_t i = 0; i < plan.layers.size(); ++i)
      apply_layer(files, plan.layers[i], i + 1, plan.layers.size(), root_fd, result.report, progress);
  } catch (...) {
    close(root_fd);
    throw;
  }
  close(root_fd);

  json::object manifest;
  manifest["digest"] = "sha256:" + plan.config_hex;
  manifest["source"] = "import " + std::filesystem::absolute(options.file).string();
  manifest["format"] = plan.format;
  for (const char* key : {"architecture", "os"})
    if (auto* v = plan.config.if_contains(key); v && v->is_string()) manifest[key] = v->as_string();
  manifest["layers"] = plan.layers.size();
  json::array packages;
  for (const auto& p : installed_packages(staging->rootfs())) packages.emplace_back(p);
  manifest["packages"] = std::move(packages);
  json::array skipped;
  for (const auto& s : result.report.skipped) skipped.emplace_back(s);
  manifest["skipped_entries"] = std::move(skipped);
  manifest["skipped_count"] = result.report.skipped_count;
  for (const auto& s : result.report.skipped) std::fprintf(progress, "  %s\n", s.c_str());
  if (result.report.skipped_count > result.report.skipped.size())
    std::fprintf(progress, "  ... and %lu more skipped entries\n",
                 (unsigned long)(result.report.skipped_count - result.report.skipped.size()));
  result.image = staging->commit(ref, std::move(manifest));
  return result;
}

}  // namespace sandboxd::images
