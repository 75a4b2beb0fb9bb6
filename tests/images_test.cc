// Sandbox images: import of docker-save and OCI tarballs the test writes itself (layers
// with whiteouts, symlinks, hardlinks and hostile entries), the store's ls/rm, sandboxes
// and the server on an image, and a minimal debootstrap build when Debian is reachable.

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "images/import.h"
#include "images/store.h"
#include "sandbox_harness.h"
#include "server_harness.h"

namespace {

namespace fs = std::filesystem;
namespace im = sandboxd::images;
namespace json = boost::json;
using sandboxd::testing::sh;

// --- a tiny tar writer -------------------------------------------------------------

class TarWriter {
 public:
  void file(const std::string& path, const std::string& content, unsigned mode = 0644, unsigned uid = 0) {
    header(path, "", '0', mode, content.size(), uid);
    data_ += content;
    pad();
  }
  void dir(const std::string& path, unsigned mode = 0755) { header(path, "", '5', mode, 0); }
  void symlink(const std::string& path, const std::string& target) { header(path, target, '2', 0777, 0); }
  void hardlink(const std::string& path, const std::string& target) { header(path, target, '1', 0644, 0); }
  void node(const std::string& path, char type) { header(path, "", type, 0666, 0); }
  // A file whose name comes from a pax extended header instead of a GNU long name.
  void pax_file(const std::string& path, const std::string& content) {
    std::string record = " path=" + path + "\n";
    size_t length = record.size();
    while (std::to_string(length).size() + record.size() != length)
      length = std::to_string(length).size() + record.size();
    std::string body = std::to_string(length) + record;
    raw_header("PaxHeaders/x", "", 'x', 0644, body.size(), 0);
    data_ += body;
    pad();
    raw_header("short-name-ignored", "", '0', 0644, content.size(), 0);
    data_ += content;
    pad();
  }
  std::string finish() const { return data_ + std::string(1024, '\0'); }

 private:
  void header(const std::string& path, const std::string& link, char type, unsigned mode, size_t size,
              unsigned uid = 0) {
    // GNU long names and links, as GNU tar writes them.
    if (link.size() >= 100) {
      raw_header("././@LongLink", "", 'K', 0644, link.size() + 1, 0);
      data_ += link + '\0';
      pad();
    }
    if (path.size() >= 100) {
      raw_header("././@LongLink", "", 'L', 0644, path.size() + 1, 0);
      data_ += path + '\0';
      pad();
    }
    raw_header(path.substr(0, 99), link.substr(0, 99), type, mode, size, uid);
  }
  void raw_header(const std::string& name, const std::string& link, char type, unsigned mode, size_t size,
                  unsigned uid) {
    char h[512] = {};
    std::snprintf(h, 100, "%s", name.c_str());
    std::snprintf(h + 100, 8, "%07o", mode);
    std::snprintf(h + 108, 8, "%07o", uid);
    std::snprintf(h + 116, 8, "%07o", uid);
    std::snprintf(h + 124, 12, "%011lo", static_cast<unsigned long>(size));
    std::snprintf(h + 136, 12, "%011o", 1700000000u);
    std::memset(h + 148, ' ', 8);
    h[156] = type;
    std::snprintf(h + 157, 100, "%s", link.c_str());
    std::memcpy(h + 257,
                "ustar\0"
                "00",
                8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    data_.append(h, 512);
  }
  void pad() { data_.append((512 - data_.size() % 512) % 512, '\0'); }
  std::string data_;
};

std::string gzip(const std::string& plain) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, plain.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = plain.size();
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = out.size();
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

struct Layer {
  std::string tar;  // uncompressed
  bool gzipped = false;
  std::string stored() const { return gzipped ? gzip(tar) : tar; }
};

std::string config_json(const std::vector<Layer>& layers) {
  json::array diff_ids;
  for (const auto& l : layers) diff_ids.emplace_back("sha256:" + im::sha256_hex(l.tar));
  return json::serialize(json::object{
      {"architecture", "amd64"}, {"os", "linux"}, {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}});
}

// `docker save` (classic layout): manifest.json, <config digest>.json, <n>/layer.tar.
std::string docker_save(const std::vector<Layer>& layers, const std::string& repo_tag) {
  TarWriter outer;
  std::string config = config_json(layers);
  std::string config_name = im::sha256_hex(config) + ".json";
  json::array layer_paths;
  for (size_t i = 0; i < layers.size(); ++i)
    layer_paths.emplace_back("layer" + std::to_string(i) + "/layer.tar");
  json::array tags;
  if (!repo_tag.empty()) tags.emplace_back(repo_tag);
  outer.file("manifest.json", json::serialize(json::array{json::object{
                                  {"Config", config_name}, {"RepoTags", tags}, {"Layers", layer_paths}}}));
  outer.file(config_name, config);
  for (size_t i = 0; i < layers.size(); ++i) {
    outer.dir("layer" + std::to_string(i) + "/");
    outer.file("layer" + std::to_string(i) + "/layer.tar", layers[i].stored());
  }
  return outer.finish();
}

json::object descriptor(const std::string& media_type, const std::string& blob) {
  return {{"mediaType", media_type}, {"digest", "sha256:" + im::sha256_hex(blob)}, {"size", blob.size()}};
}

// An OCI image layout: oci-layout, index.json, blobs/sha256/<digest>.
std::string oci_layout(const std::vector<Layer>& layers, const std::string& ref_name) {
  TarWriter outer;
  std::vector<std::string> blobs;
  std::string config = config_json(layers);
  blobs.push_back(config);
  json::array layer_descriptors;
  for (const auto& l : layers) {
    blobs.push_back(l.stored());
    layer_descriptors.push_back(descriptor(
        l.gzipped ? "application/vnd.oci.image.layer.v1.tar+gzip" : "application/vnd.oci.image.layer.v1.tar",
        blobs.back()));
  }
  std::string manifest =
      json::serialize(json::object{{"schemaVersion", 2},
                                   {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                   {"config", descriptor("application/vnd.oci.image.config.v1+json", config)},
                                   {"layers", layer_descriptors}});
  blobs.push_back(manifest);
  auto manifest_descriptor = descriptor("application/vnd.oci.image.manifest.v1+json", manifest);
  manifest_descriptor["annotations"] = json::object{{"org.opencontainers.image.ref.name", ref_name}};
  outer.file("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  outer.file("index.json", json::serialize(json::object{{"schemaVersion", 2},
                                                        {"manifests", json::array{manifest_descriptor}}}));
  for (const auto& blob : blobs) outer.file("blobs/sha256/" + im::sha256_hex(blob), blob);
  return outer.finish();
}

class ImagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-images-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    data_ = root_ / "data";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fs::path write(const std::string& name, const std::string& bytes) {
    fs::path path = root_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  im::ImportResult import(const fs::path& file, const std::string& name = "") {
    im::ImageStore store(data_.string());
    im::ImportOptions options;
    options.file = file.string();
    if (!name.empty()) options.name = im::parse_ref(name);
    return im::import_image(store, options);
  }
  // What the images folder holds: installed images and any leftover staging folder.
  std::vector<std::string> images_dir_entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(data_ / "images"))
      names.push_back(e.path().filename().string());
    return names;
  }
  fs::path root_, data_;
};

unsigned mode_of(const fs::path& path) {
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(ImagesTest, DockerSaveLayersApplyInOrderWithWhiteoutsOpaqueDirsSymlinksAndHardlinks) {
  TarWriter base;
  base.dir("./a/");
  base.file("./a/keep", "kept");
  base.file("./a/gone", "whited out");
  base.dir("./b/");
  base.file("./b/x", "lower x");
  base.dir("./b/sub/");
  base.file("./b/sub/y", "lower y");
  base.symlink("./link", "a/keep");
  base.hardlink("./a/hard", "a/keep");
  base.file("./replaced", "old");
  TarWriter upper;
  upper.file("./b/z", "upper z");  // before the opaque marker: it stays
  upper.file("./b/.wh..wh..opq", "");
  upper.file("./a/.wh.gone", "");
  upper.file("./replaced", "new", 0600);
  upper.file("./c/deep/file", "parents made on the way");
  auto file =
      write("img.tar", docker_save({{base.finish(), false}, {upper.finish(), true}}, "example/layers:2"));

  auto result = import(file);
  EXPECT_EQ(result.format, "docker-save");
  EXPECT_EQ(result.image.ref.str(), "example/layers:2");
  fs::path rootfs = result.image.rootfs;
  EXPECT_EQ(rootfs, data_ / "images" / "example+layers@2" / "rootfs");
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / "a/keep"), "kept");
  EXPECT_FALSE(fs::exists(rootfs / "a/gone"));
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / "b/z"), "upper z");
  EXPECT_FALSE(fs::exists(rootfs / "b/x"));
  EXPECT_FALSE(fs::exists(rootfs / "b/sub"));
  EXPECT_FALSE(fs::exists(rootfs / "b/.wh..wh..opq"));
  EXPECT_FALSE(fs::exists(rootfs / "a/.wh.gone"));
  EXPECT_EQ(fs::read_symlink(rootfs / "link"), "a/keep");
  EXPECT_TRUE(fs::equivalent(rootfs / "a/hard", rootfs / "a/keep"));
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / "replaced"), "new");
  EXPECT_EQ(mode_of(rootfs / "replaced"), 0600u);
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / "c/deep/file"), "parents made on the way");
  EXPECT_EQ(mode_of(rootfs), 0755u);

  // The manifest beside the root.
  auto manifest =
      sandboxd::testing::json(sandboxd::testing::read_file(data_ / "images/example+layers@2/manifest.json"))
          .as_object();
  EXPECT_EQ(manifest.at("name"), "example/layers");
  EXPECT_EQ(manifest.at("tag"), "2");
  EXPECT_EQ(manifest.at("digest").as_string(),
            "sha256:" + im::sha256_hex(config_json({{base.finish(), false}, {upper.finish(), true}})));
  EXPECT_EQ(manifest.at("size").to_number<uint64_t>(),
            4u + 7u + 3u + 23u);  // keep (hard counted once), z, replaced, file
  EXPECT_TRUE(manifest.at("created").is_string());
  EXPECT_EQ(manifest.at("source").as_string(), "import " + file.string());
  EXPECT_EQ(images_dir_entries(), std::vector<std::string>{"example+layers@2"});
}

TEST_F(ImagesTest, OciLayoutWithPlainAndGzipLayersAndANameFromItsAnnotation) {
  TarWriter first;
  first.file("etc/os-release", "ID=test\n");
  first.file("usr/bin/tool", "#!/bin/sh\necho tool\n", 0755);
  TarWriter second;
  second.file("usr/bin/.wh.tool", "");
  second.file("usr/share/data", "data");
  auto file =
      write("oci.tar", oci_layout({{first.finish(), false}, {second.finish(), true}}, "example/oci:3.1"));
  auto result = import(file);
  EXPECT_EQ(result.format, "oci");
  EXPECT_EQ(result.image.ref.str(), "example/oci:3.1");
  fs::path rootfs = result.image.rootfs;
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / "etc/os-release"), "ID=test\n");
  EXPECT_FALSE(fs::exists(rootfs / "usr/bin/tool"));
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / "usr/share/data"), "data");

  // The whole tarball gzipped (`docker save | gzip`) imports too, under another name.
  auto gz = write("oci.tar.gz", gzip(sandboxd::testing::read_file(file)));
  EXPECT_EQ(import(gz, "example/oci:gz").image.ref.str(), "example/oci:gz");
}

TEST_F(ImagesTest, HostileEntriesNeverLandOutsideTheImageNorKeepPrivileges) {
  fs::path outside = root_ / "outside";
  fs::create_directories(outside);
  sandboxd::testing::write_text(outside / "keep", "sentinel");
  const std::string tag = std::to_string(getpid());
  struct stat passwd_before;
  ASSERT_EQ(stat("/etc/passwd", &passwd_before), 0);

  TarWriter evil;
  evil.file("../outside/evil1", "x");
  evil.file("a/../../outside/evil2", "x");
  evil.symlink("esc", outside.string());  // absolute, to a real host folder
  evil.file("esc/evil3", "through an absolute symlink");
  evil.symlink("up", "../../../../../../../../..");
  evil.file("up/evil4-" + tag, "through a ../ symlink");
  evil.hardlink("hl", "/etc/passwd");
  evil.hardlink("hl2", "../outside/keep");
  evil.hardlink("hl3", "esc/keep");  // the image's esc/, which has no keep
  evil.node("dev/evilchar", '3');
  evil.node("dev/evilblock", '4');
  evil.node("evilfifo", '6');
  evil.file("bin/suid", "#!/bin/sh\n", 04755);
  evil.file("bin/sgid", "#!/bin/sh\n", 02755);
  evil.file("bin/sticky", "#!/bin/sh\n", 01755);
  evil.file("bin/owned", "x", 0644, /*uid=*/4242);
  evil.dir("sgiddir", 02775);
  evil.dir("tmpdir", 01777);
  evil.file("/abs/file", "a leading / is dropped");
  std::string long_name;
  for (int i = 0; i < 50; ++i) long_name += std::string(99, 'n') + "/";
  long_name += "end";  // 5,003 characters, through a GNU long name
  evil.file(long_name, "too long");
  evil.pax_file(std::string(5000, 'p'), "too long too");  // through a pax path
  TarWriter later;  // a later layer writing through the first one's symlinks
  later.file("esc/evil5", "later layer, absolute symlink");
  later.file("up/evil6-" + tag, "later layer, ../ symlink");
  later.file("esc/../../../outside/evil7", "refused");

  auto file =
      write("evil.tar", docker_save({{evil.finish(), false}, {later.finish(), true}}, "example/evil:1"));
  auto result = import(file);
  fs::path rootfs = result.image.rootfs;

  // Nothing outside the image: the sentinel folder and the host root are as they were.
  std::set<std::string> beside;
  for (const auto& e : fs::recursive_directory_iterator(root_)) {
    std::string rel = e.path().lexically_relative(root_).string();
    if (rel.rfind("data", 0) != 0) beside.insert(rel);
  }
  EXPECT_EQ(beside, (std::set<std::string>{"outside", "outside/keep", "evil.tar"}));
  EXPECT_EQ(sandboxd::testing::read_file(outside / "keep"), "sentinel");
  EXPECT_FALSE(fs::exists("/evil4-" + tag));
  EXPECT_FALSE(fs::exists("/evil6-" + tag));
  struct stat passwd_after;
  ASSERT_EQ(stat("/etc/passwd", &passwd_after), 0);
  EXPECT_EQ(passwd_after.st_nlink, passwd_before.st_nlink);

  // Symlinks were followed as the image sees them: inside it.
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / outside.relative_path() / "evil3"),
            "through an absolute symlink");
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / outside.relative_path() / "evil5"),
            "later layer, absolute symlink");
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / ("evil4-" + tag)), "through a ../ symlink");
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / ("evil6-" + tag)), "later layer, ../ symlink");
  EXPECT_EQ(sandboxd::testing::read_file(rootfs / "abs/file"), "a leading / is dropped");
  // Refused or skipped, and said so.
  for (const char* name : {"hl", "hl2", "hl3", "dev/evilchar", "dev/evilblock", "evilfifo", "outside"})
    EXPECT_FALSE(fs::exists(fs::symlink_status(rootfs / name))) << name;
  EXPECT_FALSE(fs::exists(rootfs / "nnnnnnnnn"));
  EXPECT_FALSE(fs::exists(rootfs / std::string(200, 'p')));
  std::string skipped;
  for (const auto& s : result.report.skipped) skipped += s + "\n";
  EXPECT_EQ(result.report.skipped_count, 11u) << skipped;
  for (const char* expected :
       {"../outside/evil1: refused", "hl: skipped: a hardlink to \"/etc/passwd\"", "hl2: refused: a hardlink",
        "dev/evilchar: skipped: a character device", "dev/evilblock: skipped: a block device",
        "evilfifo: skipped: a FIFO", "refused: a name of 5003 characters",
        "refused: a name of 5000 characters", "esc/../../../outside/evil7: refused"})
    EXPECT_NE(skipped.find(expected), std::string::npos) << expected << " not in\n" << skipped;
  // No privileges: setuid, setgid and sticky off files, root owns everything.
  EXPECT_EQ(mode_of(rootfs / "bin/suid"), 0755u);
  EXPECT_EQ(mode_of(rootfs / "bin/sgid"), 0755u);
  EXPECT_EQ(mode_of(rootfs / "bin/sticky"), 0755u);
  EXPECT_EQ(mode_of(rootfs / "sgiddir"), 0775u);
  EXPECT_EQ(mode_of(rootfs / "tmpdir"), 01777u);
  struct stat owned;
  ASSERT_EQ(lstat((rootfs / "bin/owned").c_str(), &owned), 0);
  EXPECT_EQ(owned.st_uid, 0u);
  EXPECT_EQ(owned.st_gid, 0u);
  // The manifest lists what was skipped.
  auto manifest =
      sandboxd::testing::json(sandboxd::testing::read_file(fs::path(result.image.dir) / "manifest.json"))
          .as_object();
  EXPECT_EQ(manifest.at("skipped_count").to_number<uint64_t>(), 11u);
}

TEST_F(ImagesTest, ATruncatedTarballOrABadDigestLeavesNoImage) {
  TarWriter layer;
  layer.file("hello", "hello-content-marker");
  std::string good = docker_save({{layer.finish(), false}}, "example/broken:1");

  auto truncated = write("truncated.tar", good.substr(0, good.size() / 2 + 100));
  EXPECT_THROW(import(truncated), im::ImageError);
  EXPECT_TRUE(images_dir_entries().empty());

  // The layer's bytes changed after its digest was taken (the config's diff_id).
  std::string tampered = good;
  tampered.replace(tampered.find("hello-content-marker"), 5, "jello");
  auto bad = write("bad.tar", tampered);
  try {
    import(bad);
    ADD_FAILURE() << "a layer that does not match its diff_id was imported";
  } catch (const im::ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("does not match the config's diff_id"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(images_dir_entries().empty());

  // An OCI blob whose bytes are not its name.
  std::string oci = oci_layout({{layer.finish(), false}}, "example/broken:2");
  oci.replace(oci.find("hello-content-marker"), 5, "jello");
  try {
    import(write("bad-oci.tar", oci));
    ADD_FAILURE() << "a blob that does not match its digest was imported";
  } catch (const im::ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its digest"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(images_dir_entries().empty());

  // Not an image at all; and a tarball without a name needs --name.
  EXPECT_THROW(import(write("garbage.tar", std::string(4096, 'g'))), im::ImageError);
  EXPECT_THROW(import(write("nameless.tar", docker_save({{layer.finish(), false}}, ""))), im::ImageError);
  EXPECT_TRUE(images_dir_entries().empty());
  EXPECT_EQ(
      import(write("named.tar", docker_save({{layer.finish(), false}}, "")), "example/named").image.ref.str(),
      "example/named:latest");
}

TEST_F(ImagesTest, RemovingAnImageNeverCrossesAMountPoint) {
  TarWriter layer;
  layer.dir("proc/");
  layer.file("f", "x");
  auto image = import(write("img.tar", docker_save({{layer.finish(), false}}, "example/mounted:1"))).image;
  // As a killed build could leave it: something mounted inside the image.
  fs::path mount_point = fs::path(image.rootfs) / "proc";
  ASSERT_EQ(sh("mount -t tmpfs -o size=1m sandboxd-test " + mount_point.string() + " && echo ok"), "ok\n");
  sandboxd::testing::write_text(mount_point / "not-the-images", "kept");
  im::ImageStore store(data_.string());
  EXPECT_THROW(store.remove(im::parse_ref("example/mounted:1")), im::ImageError);
  EXPECT_FALSE(store.find(im::parse_ref("example/mounted:1")));  // gone from the store all the same
  std::string mounted = sh("findmnt -rn -o TARGET | grep " + data_.string() + " | head -1");
  ASSERT_FALSE(mounted.empty());
  mounted.pop_back();
  EXPECT_EQ(sandboxd::testing::read_file(fs::path(mounted) / "not-the-images"), "kept");
  sh("umount " + mounted);
}

TEST(ImageNames, PathTricksAndBadNamesAreRefused) {
  for (const char* bad : {"../x", "a/../b", "a//b", "/abs", "x/", "UPPER", ".hidden", "a:../../b", "a:b/c",
                          "a:-x", "a:.x", "", "name@sha256:abc", "a b"})
    EXPECT_THROW(im::parse_ref(bad), im::ImageError) << bad;
  EXPECT_EQ(im::parse_ref("example/foo").str(), "example/foo:latest");
  EXPECT_EQ(im::parse_ref("registry.local:5000/team/img:v1.2").str(), "registry.local:5000/team/img:v1.2");
  im::ImageStore store((fs::temp_directory_path() / ("sandboxd-names-" + std::to_string(getpid()))).string());
  EXPECT_EQ(fs::path(store.dir_for(im::parse_ref("registry.local:5000/team/img:v1"))).filename(),
            "registry.local=5000+team+img@v1");
  fs::remove_all(fs::path(store.images_dir()).parent_path());
}

TEST_F(ImagesTest, LsAndRmFromTheCommandLine) {
  TarWriter layer;
  layer.file("f", std::string(3000, 'x'));
  auto file = write("img.tar", docker_save({{layer.finish(), true}}, "example/cli:1"));
  const std::string bin = SANDBOXD_PATH, dd = " --data-dir " + data_.string();
  int status = -1;
  std::string out = sh(bin + " image import " + file.string() + dd + " 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("layer 1/1 (layer0/layer.tar) gzip: 1 files"), std::string::npos) << out;
  sh(bin + " image import " + file.string() + " --name example/cli:2" + dd, &status);
  EXPECT_EQ(status, 0);
  std::string ls = sh(bin + " image ls" + dd, &status);
  EXPECT_EQ(status, 0);
  std::regex row1("example/cli +1 +sha256:[0-9a-f]{12} +2\\.9 KiB +20[0-9-]+T[0-9:]+Z");
  EXPECT_TRUE(std::regex_search(ls, std::regex("^NAME +TAG +DIGEST +SIZE +CREATED\n"))) << ls;
  EXPECT_TRUE(std::regex_search(ls, row1)) << ls;
  EXPECT_NE(ls.find("example/cli  2 "), std::string::npos) << ls;
  out = sh(bin + " image rm example/cli:1" + dd, &status);
  EXPECT_EQ(status, 0) << out;
  ls = sh(bin + " image ls" + dd);
  EXPECT_FALSE(std::regex_search(ls, row1)) << ls;
  EXPECT_NE(ls.find("example/cli  2 "), std::string::npos) << ls;
  out = sh(bin + " image rm example/cli:1" + dd + " 2>&1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("no image example/cli:1"), std::string::npos) << out;
  out = sh(bin + " image rm ../../etc" + dd + " 2>&1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(images_dir_entries(), std::vector<std::string>{"example+cli@2"});
}

// --- sandboxes on an image ------------------------------------------------------------

// A layer with the host's bash and coreutils programs a test runs, with the libraries
// ldd names (at the paths it names), /bin -> usr/bin, and marker files: enough to run
// commands, and nothing else of the host's /usr.
std::string host_programs_layer(const std::string& marker) {
  TarWriter layer;
  std::set<std::string> files;
  for (const char* program :
       {"/usr/bin/bash", "/usr/bin/cat", "/usr/bin/ls", "/usr/bin/touch", "/usr/bin/id"}) {
    files.insert(program);
    std::istringstream ldd(sh(std::string("ldd ") + program));
    for (std::string word; ldd >> word;)
      if (word[0] == '/') files.insert(word);
  }
  std::set<std::string> dirs;
  for (const auto& f : files) {
    for (fs::path d = fs::path(f).parent_path(); d != "/"; d = d.parent_path())
      dirs.insert(d.string().substr(1));
  }
  for (const auto& d : dirs) layer.dir(d + "/");
  for (const auto& f : files) layer.file(f.substr(1), sandboxd::testing::read_file(f), 0755);
  layer.symlink("bin", "usr/bin");
  layer.file("etc/image-marker", marker);
  layer.file("usr/share/marker", marker);
  return layer.finish();
}

// What a sandbox on the host-programs image shows: the image's files, the sandbox's own
// /etc files over the image's, nothing writable.
void expect_sandbox_sees_image(const im::ImageInfo& image, const std::string& marker) {
  sandboxd::runtime::RuntimeOptions options;
  options.image_root = image.rootfs;
  sandboxd::testing::Harness harness(options);
  sandboxd::testing::ContainerDirs dirs(options.host_uid, options.host_gid);
  auto sandbox = harness.start(harness.options_for(dirs));
  auto result = harness.exec(
      *sandbox,
      "cat /etc/image-marker /usr/share/marker; ls /usr/bin; cat /etc/passwd /etc/shadow /etc/subuid "
      "/etc/hosts; "
      "touch /usr/share/new 2>&1; echo touch=$?; touch /etc/image-marker 2>&1; echo etc=$?; "
      "touch /etc/new 2>&1; echo etcnew=$?; echo v > /var/tmp/v && cat /var/tmp/v /tmp/v; id -u; "
      "bash -l -x -c 'echo login:$PATH' 2>&1");
  harness.stop(*sandbox);
  EXPECT_EQ(result.return_code, 0) << result.stderr_text;
  // The image's files, not the host's (the host has python3 and much more in /usr/bin).
  EXPECT_NE(result.stdout_text.find(marker + marker), std::string::npos) << result.stdout_text;
  EXPECT_EQ(result.stdout_text.find("python3"), std::string::npos) << result.stdout_text;
  // The sandbox's passwd and hosts, not the image's; the image's shadow hidden.
  EXPECT_NE(result.stdout_text.find("agent:x:1000:1000:agent:/home/agent:/bin/bash"), std::string::npos)
      << result.stdout_text;
  EXPECT_NE(result.stdout_text.find("127.0.0.1\tlocalhost"), std::string::npos) << result.stdout_text;
  EXPECT_EQ(result.stdout_text.find("image-root"), std::string::npos) << result.stdout_text;
  EXPECT_EQ(result.stdout_text.find("image-secret"), std::string::npos) << result.stdout_text;
  EXPECT_NE(result.stdout_text.find("Read-only file system\ntouch=1"), std::string::npos)
      << result.stdout_text;
  EXPECT_NE(result.stdout_text.find("etc=1"), std::string::npos) << result.stdout_text;
  EXPECT_NE(result.stdout_text.find("etcnew=1"), std::string::npos) << result.stdout_text;
  EXPECT_NE(result.stdout_text.find("etcnew=1\nv\nv\n1000\n"), std::string::npos) << result.stdout_text;
  // A login shell takes the profile's branch for a user who is not root, without id.
  EXPECT_NE(result.stdout_text.find("\nlogin:/usr/bin:/usr/games\n"), std::string::npos)
      << result.stdout_text;
  EXPECT_EQ(result.stdout_text.find("id -u"), std::string::npos) << result.stdout_text;
  EXPECT_FALSE(fs::exists(fs::path(image.rootfs) / "usr/share/new"));
  EXPECT_FALSE(fs::exists(fs::path(image.rootfs) / "etc/new"));
  EXPECT_EQ(sandboxd::testing::read_file(fs::path(image.rootfs) / "etc/image-marker"), marker);
}

std::string host_programs_image_layers(const std::string& marker, std::vector<Layer>& layers) {
  layers.push_back({host_programs_layer(marker), true});
  TarWriter etc;  // an image's own accounts and a hosts symlink: never what a sandbox sees
  etc.file("etc/passwd", "image-root:x:0:0::/root:/bin/bash\n");
  etc.file("etc/shadow", "image-root:image-secret:19000::::::\n", 0640);
  etc.file("etc/subuid", "image-root:image-secret-range:65536\n");
  etc.symlink("etc/hosts", "/etc/passwd");
  etc.file("var/tmp/left-by-the-build", "x");
  // Debian's way of telling root from the others: the store rewrites it (no `id -u` per
  // login shell).
  etc.file("etc/profile",
           "if [ \"$(id -u)\" -eq 0 ]; then\n  PATH=\"/usr/sbin:/usr/bin\"\nelse\n  "
           "PATH=\"/usr/bin:/usr/games\"\nfi\n"
           "export PATH\n");
  layers.push_back({etc.finish(), false});
  return marker;
}

TEST_F(ImagesTest, ASandboxRunsOnAnImportedImageAndCannotWriteIt) {
  std::vector<Layer> layers;
  const std::string marker = host_programs_image_layers("marker-" + std::to_string(getpid()), layers);
  auto image = import(write("host-programs.tar", docker_save(layers, "example/programs:1"))).image;
  // The store replaced the hosts symlink with a placeholder: /etc is bound whole.
  EXPECT_EQ(fs::symlink_status(fs::path(image.rootfs) / "etc/hosts").type(), fs::file_type::regular);
  EXPECT_EQ(fs::file_size(fs::path(image.rootfs) / "etc/shadow"), 0u);  // no password hashes kept
  EXPECT_EQ(sandboxd::testing::read_file(fs::path(image.rootfs) / "etc/profile"),
            "if [ \"${EUID:-$(id -u)}\" -eq 0 ]; then\n  PATH=\"/usr/sbin:/usr/bin\"\nelse\n  "
            "PATH=\"/usr/bin:/usr/games\"\nfi\nexport PATH\n");
  expect_sandbox_sees_image(image, marker);
  // A root that is not the store's (a symlink at a generated name): one bind per entry.
  fs::remove(fs::path(image.rootfs) / "etc/hostname");
  fs::create_symlink("/etc/passwd", fs::path(image.rootfs) / "etc/hostname");
  expect_sandbox_sees_image(image, marker);
}

TEST_F(ImagesTest, TheServerRunsTheConfiguredImage) {
  const std::string marker = "served-" + std::to_string(getpid());
  std::vector<Layer> layers;
  host_programs_image_layers(marker, layers);
  // The image's own system bundle: the sandboxes' trust bundle is made from it (its
  // certificates and the installation's CA), bound over it (docs/network.md).
  TarWriter ssl;
  ssl.dir("etc/ssl");
  ssl.dir("etc/ssl/certs");
  ssl.file("etc/ssl/certs/ca-certificates.crt",
           "-----BEGIN CERTIFICATE-----\nSU1BR0U=\n-----END CERTIFICATE-----\n");
  layers.push_back({ssl.finish(), false});
  import(write("host-programs.tar", docker_save(layers, "example/served:1")));
  sandboxd::testing::ServerProcess server(
      "external:\n  opensandbox:\n    codeExecution:\n      image:\n        repository: example/served\n     "
      "   tag: \"1\"\n",
      data_);
  EXPECT_EQ(sandboxd::testing::json(sh("curl -sS " + server.url("/ready"))),
            sandboxd::testing::json(R"({"status":"ready"})"));
  auto reply = server.curl_json(
      "-X POST " + server.base() +
      "/containers/c1/tools/bash_code_execution -d '{\"command\":\"cat /etc/image-marker\"}'");
  EXPECT_EQ(reply.at("stdout").as_string(), marker) << reply;
  EXPECT_NE(server.log().find("sandbox image: example/served:1 (sha256:"), std::string::npos) << server.log();
  // (bash's builtins: the image has no grep or cmp.)
  reply = server.curl_json(
      "-X POST " + server.base() +
      "/containers/c1/tools/bash_code_execution -d '{\"command\":\"cd /etc/ssl/certs; n=0; c=0; while read "
      "-r l; "
      "do case $l in SU1BR0U=) n=$((n+1));; *BEGIN*) c=$((c+1));; esac; done < ca-certificates.crt; echo $n "
      "$c; "
      "b=$(<ca-certificates.crt); t=$(<$SSL_CERT_FILE); [[ -n $b && $b == $t ]] && echo same\"}'");
  EXPECT_EQ(reply.at("stdout").as_string(), "1 2\nsame\n") << reply;
}

TEST_F(ImagesTest, AMissingImageMakesReadyAnswer503NamingItAndExecutionsFailClearly) {
  sandboxd::testing::ServerProcess server(
      "external:\n  opensandbox:\n    codeExecution:\n      image:\n        repository: example/foo\n        "
      "tag: \"1\"\n");
  std::string headers = sh("curl -sS -D - -o /dev/null " + server.url("/ready"));
  EXPECT_NE(headers.find("HTTP/1.1 503"), std::string::npos) << headers;
  auto ready = sandboxd::testing::json(sh("curl -sS " + server.url("/ready")));
  EXPECT_EQ(ready.at("status"), "not_ready");
  EXPECT_EQ(ready.at("reason"), "image example/foo:1 is not installed; see `sandboxd image ls`");
  auto reply = server.curl_json("-X POST " + server.base() +
                                "/containers/c1/tools/bash_code_execution -d '{\"command\":\"true\"}'");
  EXPECT_NE(json::serialize(reply).find("image example/foo:1 is not installed"), std::string::npos) << reply;
  // The server is up and serves everything else.
  EXPECT_EQ(server.status(server.url("/health")), 200);
  EXPECT_EQ(server.status(server.base() + "/files?scope_id=c1"), 200);
}

// --- a minimal build ---------------------------------------------------------------------

TEST_F(ImagesTest, AMinimalDebootstrapBuildRunsInASandbox) {
  int status = -1;
  sh("curl -sfI --max-time 5 http://deb.debian.org/debian/dists/bookworm/Release >/dev/null", &status);
  if (status != 0)
    GTEST_SKIP() << "deb.debian.org is not reachable from this machine: the minimal build test is skipped";
  if (access("/usr/sbin/debootstrap", X_OK) != 0)
    GTEST_SKIP() << "debootstrap is not installed (scripts/setup.sh installs it)";
  const std::string bin = SANDBOXD_PATH;
  std::string out =
      sh(bin + " image build example/minimal:1 --minimal --packages python3-minimal --data-dir " +
             data_.string() + " 2>&1",
         &status);
  ASSERT_EQ(status, 0) << out;
  for (const char* stage :
       {"==> [1/4] debootstrap", "==> [2/4] apt-get install 1 package(s): python3-minimal",
        "==> [3/4] cleaning", "==> [4/4] recording", "built example/minimal:1 sha256:"})
    EXPECT_NE(out.find(stage), std::string::npos) << stage << " not in the output";
  im::ImageStore store(data_.string());
  auto image = store.find(im::parse_ref("example/minimal:1"));
  ASSERT_TRUE(image);
  std::string packages = json::serialize(image->manifest.at("packages"));
  EXPECT_NE(packages.find("\"python3-minimal="), std::string::npos);
  EXPECT_NE(packages.find("\"bash="), std::string::npos);
  EXPECT_TRUE(
      image->manifest.at("not_in_debian").as_array().empty());  // minimal: nothing was asked of Debian
  EXPECT_GT(image->size, 50u << 20);
  // No device nodes and no setuid programs left in the image.
  for (const auto& e : fs::recursive_directory_iterator(image->rootfs)) {
    auto st = e.symlink_status();
    EXPECT_TRUE(st.type() == fs::file_type::regular || st.type() == fs::file_type::directory ||
                st.type() == fs::file_type::symlink)
        << e.path();
    if (st.type() == fs::file_type::regular) {
      EXPECT_EQ(st.permissions() & (fs::perms::set_uid | fs::perms::set_gid), fs::perms::none) << e.path();
    }
  }
  sandboxd::runtime::RuntimeOptions options;
  options.image_root = image->rootfs;
  sandboxd::testing::Harness harness(options);
  sandboxd::testing::ContainerDirs dirs(options.host_uid, options.host_gid);
  auto sandbox = harness.start(harness.options_for(dirs));
  auto result =
      harness.exec(*sandbox, "python3 -c 'import sys; print(sys.version_info[:2])'; cat /etc/debian_version");
  harness.stop(*sandbox);
  EXPECT_EQ(result.return_code, 0) << result.stderr_text;
  EXPECT_NE(result.stdout_text.find("(3, 11)\n12."), std::string::npos) << result.stdout_text;
}

}  // namespace
