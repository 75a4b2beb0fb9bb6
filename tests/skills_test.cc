// Skills end to end (docs/http-api.md): the Skills API on a real `sandboxd serve` — uploads as
// files[] and as zip, versions, another owner's 404, hostile uploads refused with
// nothing stored — and container.skills in /messages against the scripted upstream
// (skills_suite.h, here on the native tier): the skill is read-only at
// /mnt/skills/<name>/ for that request only, its helper script writes an output that the
// Files API serves, the upstream prompt lists it, and the response's container names it
// with its resolved version.

#include <atomic>
#include <set>
#include <thread>

#include "skills_suite.h"

INSTANTIATE_TEST_SUITE_P(Native, SkillsInSandboxTest, ::testing::Values(SandboxTier::kNative),
                         sandbox_tier_name);

namespace {

class SkillsTest : public ::testing::Test, public SkillsServer<SkillsTest> {
 protected:
  static void SetUpTestSuite() { start_server(""); }
  static void TearDownTestSuite() { stop_server(); }
  void SetUp() override { prepare_test(); }
  void TearDown() override { expect_every_step_used(); }
};

TEST_F(SkillsTest, CreateListRetrieveVersionsDelete) {
  int status = 0;
  auto skill = upload_tree(report_skill(), &status);
  ASSERT_EQ(status, 200) << skill;
  const std::string id(skill.at("id").as_string());
  EXPECT_EQ(id.rfind("skill_", 0), 0u);
  EXPECT_EQ(skill.at("type"), "skill");
  EXPECT_EQ(skill.at("source").at("type"), "custom");
  EXPECT_EQ(skill.at("display_name"), "report-maker");  // from the front matter when none is given
  const std::string first(skill.at("latest_version_id").as_string());
  EXPECT_GT(std::stoll(first), 1'700'000'000'000'000LL) << "an epoch-microsecond version";

  auto fetched = server->curl_json(quoted(server->base() + "/skills/" + id));
  EXPECT_EQ(fetched, skill);
  auto custom = server->curl_json(quoted(server->base() + "/skills?source=custom"));
  ASSERT_EQ(custom.at("data").as_array().size(), 1u);
  EXPECT_EQ(custom.at("data").as_array()[0].at("id"), bj::value(id));

  // A second version, then "latest" resolves to it.
  fs::path v2 =
      write_tree(work / "v2" / "report-maker",
                 {{"SKILL.md", "---\nname: report-maker\ndescription: Second version.\n---\nv2\n"}});
  auto version = upload_tree(v2, &status, server->base() + "/skills/" + id + "/versions");
  ASSERT_EQ(status, 200) << version;
  EXPECT_EQ(version.at("type"), "skill_version");
  EXPECT_EQ(version.at("skill_id"), bj::value(id));
  EXPECT_EQ(version.at("name"), "report-maker");
  EXPECT_EQ(version.at("description"), "Second version.");
  const std::string second(version.at("version").as_string());
  EXPECT_GT(std::stoll(second), std::stoll(first));
  EXPECT_EQ(server->curl_json(quoted(server->base() + "/skills/" + id)).at("latest_version_id"),
            bj::value(second));
  auto latest = server->curl_json(quoted(server->base() + "/skills/" + id + "/versions/latest"));
  EXPECT_EQ(latest.at("version"), bj::value(second));
  auto versions = server->curl_json(quoted(server->base() + "/skills/" + id + "/versions?limit=1"));
  ASSERT_EQ(versions.at("data").as_array().size(), 1u);
  EXPECT_EQ(versions.at("data").as_array()[0].at("version"), bj::value(second)) << "newest first";
  EXPECT_EQ(versions.at("has_more"), true);
  auto rest = server->curl_json(quoted(server->base() + "/skills/" + id + "/versions?limit=1&page=" +
                                       std::string(versions.at("next_page").as_string())));
  ASSERT_EQ(rest.at("data").as_array().size(), 1u);
  EXPECT_EQ(rest.at("data").as_array()[0].at("version"), bj::value(first));

  // A new version must keep the skill's name.
  fs::path renamed =
      write_tree(work / "v3" / "other", {{"SKILL.md", "---\nname: other-name\ndescription: x\n---\n"}});
  auto refused = upload_tree(renamed, &status, server->base() + "/skills/" + id + "/versions");
  EXPECT_EQ(status, 400) << refused;

  // Stored files are read-only on disk.
  const fs::path stored = server->data_dir() / "skills" / id / second / "SKILL.md";
  ASSERT_TRUE(fs::exists(stored));
  EXPECT_EQ(fs::status(stored).permissions() & fs::perms::owner_write, fs::perms::none);

  auto deleted_version =
      server->curl_json("-X DELETE " + quoted(server->base() + "/skills/" + id + "/versions/" + first));
  EXPECT_EQ(deleted_version.at("type"), "skill_version_deleted");
  EXPECT_EQ(server->status(quoted(server->base() + "/skills/" + id + "/versions/" + first)), 404);
  // The Skills guide's flow: the last version goes too, the skill stays without one
  // (a reference to it finds no version) until it is deleted.
  auto last =
      server->curl_json("-X DELETE " + quoted(server->base() + "/skills/" + id + "/versions/" + second));
  EXPECT_EQ(last.at("type"), "skill_version_deleted") << last;
  EXPECT_EQ(last.at("id"), bj::value(second)) << last;
  auto empty = server->curl_json(quoted(server->base() + "/skills/" + id));
  EXPECT_TRUE(empty.at("latest_version_id").is_null()) << empty;
  EXPECT_FALSE(fs::exists(server->data_dir() / "skills" / id / second));
  auto deleted = server->curl_json("-X DELETE " + quoted(server->base() + "/skills/" + id));
  EXPECT_EQ(deleted.at("type"), "skill_deleted");
  EXPECT_EQ(server->status(quoted(server->base() + "/skills/" + id)), 404);
  EXPECT_FALSE(fs::exists(server->data_dir() / "skills" / id));
}

TEST_F(SkillsTest, ZipUploadAndDisplayName) {
  fs::path zip = make_zip(
      "z.writestr('zipped/SKILL.md', '---\\nname: zipped\\ndescription: From a zip.\\n---\\nbody\\n')\n"
      "info = zipfile.ZipInfo('zipped/scripts/run.sh'); info.create_system = 3\n"
      "info.external_attr = (stat.S_IFREG | 0o755) << 16\n"
      "z.writestr(info, '#!/bin/sh\\necho run\\n')\n");
  int status = 0;
  auto skill = upload(server->base() + "/skills", {{zip, "zipped.zip"}}, "-F display_name=Zipped",
                      "secret-alice", &status);
  ASSERT_EQ(status, 200) << skill;
  EXPECT_EQ(skill.at("display_name"), "Zipped");
  const std::string id(skill.at("id").as_string()), version(skill.at("latest_version_id").as_string());
  const fs::path root = server->data_dir() / "skills" / id / version;
  EXPECT_EQ(read_file(root / "scripts/run.sh"), "#!/bin/sh\necho run\n");
  EXPECT_NE(fs::status(root / "scripts/run.sh").permissions() & fs::perms::owner_exec, fs::perms::none);
  delete_all_skills();
}

TEST_F(SkillsTest, AnotherOwnersSkillIsNotFound) {
  int status = 0;
  auto skill = upload_tree(report_skill(), &status);
  ASSERT_EQ(status, 200) << skill;
  const std::string url = server->base() + "/skills/" + std::string(skill.at("id").as_string());
  EXPECT_EQ(server->status(quoted(url), "secret-bob-x"), 404);
  EXPECT_EQ(server->status(quoted(url + "/versions"), "secret-bob-x"), 404);
  EXPECT_EQ(server->status("-X DELETE " + quoted(url), "secret-bob-x"), 404);
  auto bobs = server->curl_json(quoted(server->base() + "/skills?source=custom"), "secret-bob-x");
  EXPECT_EQ(bobs.at("data").as_array().size(), 0u);
  // Nor can bob load it into a container.
  auto body = messages_body("bob-c", bj::array{bj::object{{"type", "custom"}, {"skill_id", skill.at("id")}}});
  auto reply = json(post_messages(body, &status, "secret-bob-x"));
  EXPECT_EQ(status, 404) << reply;
  EXPECT_NE(
      std::string(reply.at("error").at("message").as_string()).find(std::string(skill.at("id").as_string())),
      std::string::npos);
  EXPECT_EQ(server->status(quoted(url)), 200) << "still alice's";
  delete_all_skills();
}

TEST_F(SkillsTest, HostileUploadsAreRefusedAndNothingIsStored) {
  expect_nothing_stored();
  int status = 0;
  fs::path md = write_tree(work / "ok", {{"SKILL.md", kReportSkillMd}}) / "SKILL.md";
  fs::path small = write_tree(work / "f", {{"f.txt", "x"}}) / "f.txt";

  auto reply = upload(server->base() + "/skills", {{md, "s/SKILL.md"}, {small, "s/../../evil.txt"}}, "",
                      "secret-alice", &status);
  expect_refused(reply, status, "'..'");
  reply = upload(server->base() + "/skills", {{md, "s/SKILL.md"}, {small, "/etc/evil.txt"}}, "",
                 "secret-alice", &status);
  expect_refused(reply, status, "Absolute");
  reply = upload(server->base() + "/skills", {{md, "s/SKILL.md"}, {small, "s/a.txt"}, {small, "s/a.txt"}}, "",
                 "secret-alice", &status);
  expect_refused(reply, status, "more than once");
  // Over the 20-file cap.
  std::vector<std::pair<fs::path, std::string>> many{{md, "s/SKILL.md"}};
  for (int i = 0; i < 21; ++i) many.push_back({small, "s/f" + std::to_string(i) + ".txt"});
  reply = upload(server->base() + "/skills", many, "", "secret-alice", &status);
  expect_refused(reply, status, "more than 20 files");
  // Folders count as entries: five files, each in a chain of its own four folders, are
  // 5 + 1 + 20 entries, past the 20 allowed.
  std::vector<std::pair<fs::path, std::string>> nested{{md, "s/SKILL.md"}};
  for (int i = 0; i < 5; ++i) nested.push_back({small, "s/" + std::to_string(i) + "/a/b/c/f.txt"});
  reply = upload(server->base() + "/skills", nested, "", "secret-alice", &status);
  expect_refused(reply, status, "more than 20 files and folders");
  // Each folder is charged 4 KiB of the 64 KiB: sixteen nested ones and two small files
  // (18 entries, a few bytes of content) are past it.
  std::string sixteen = "s";
  for (int i = 0; i < 15; ++i) sixteen += "/d";
  reply = upload(server->base() + "/skills", {{md, "s/SKILL.md"}, {small, sixteen + "/f.txt"}}, "",
                 "secret-alice", &status);
  expect_refused(reply, status, "each folder counts 4096");
  // Deeper than 16 folders, whatever the counts.
  reply = upload(server->base() + "/skills", {{md, "s/SKILL.md"}, {small, sixteen + "/d/f.txt"}}, "",
                 "secret-alice", &status);
  expect_refused(reply, status, "nested deeper than 16 folders");
  // Over the 64 KiB cap.
  fs::path big = work / "big.bin";
  std::ofstream(big) << std::string(70 * 1024, 'b');
  reply = upload(server->base() + "/skills", {{md, "s/SKILL.md"}, {big, "s/big.bin"}}, "", "secret-alice",
                 &status);
  expect_refused(reply, status, "larger than");
  // Two top folders; no SKILL.md.
  reply = upload(server->base() + "/skills", {{md, "a/SKILL.md"}, {md, "b/SKILL.md"}}, "", "secret-alice",
                 &status);
  expect_refused(reply, status, "one top-level folder");
  reply = upload(server->base() + "/skills", {{small, "s/readme.txt"}}, "", "secret-alice", &status);
  expect_refused(reply, status, "SKILL.md");

  // Bad front matter.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"# no front matter\n", "front matter"},
      {"---\ndescription: d\n---\n", "'name'"},
      {"---\nname: Bad_Name\ndescription: d\n---\n", "lowercase"},
      {"---\nname: " + std::string(65, 'a') + "\ndescription: d\n---\n", "1 to 64"},
      {"---\nname: ok\ndescription: \"\"\n---\n", "description"},
      {"---\nname: ok\ndescription: " + std::string(1025, 'd') + "\n---\n", "1024"},
      {"---\nname: ok\ndescription: d\n", "closing"}};
  for (const auto& [text, phrase] : bad) {
    fs::path file = work / "bad.md";
    std::ofstream(file, std::ios::trunc) << text;
    reply = upload(server->base() + "/skills", {{file, "s/SKILL.md"}}, "", "secret-alice", &status);
    SCOPED_TRACE(text.substr(0, 80));
    expect_refused(reply, status, phrase);
  }

  // Zips: a link, a device, traversal, a bomb that lies about its size, one too big.
  const std::string skill_md = "z.writestr('s/SKILL.md', '---\\nname: s\\ndescription: d\\n---\\n')\n";
  fs::path zip =
      make_zip(skill_md +
               "info = zipfile.ZipInfo('s/link'); info.create_system = 3\n"
               "info.external_attr = (stat.S_IFLNK | 0o777) << 16\nz.writestr(info, '/etc/shadow')\n");
  reply = upload(server->base() + "/skills", {{zip, "s.zip"}}, "", "secret-alice", &status);
  expect_refused(reply, status, "Links are not allowed");
  zip = make_zip(skill_md +
                 "info = zipfile.ZipInfo('s/dev'); info.create_system = 3\n"
                 "info.external_attr = (stat.S_IFCHR | 0o666) << 16\nz.writestr(info, '')\n");
  reply = upload(server->base() + "/skills", {{zip, "s.zip"}}, "", "secret-alice", &status);
  expect_refused(reply, status, "Device");
  zip = make_zip(skill_md + "z.writestr('s/../../../escape.txt', 'x')\n");
  reply = upload(server->base() + "/skills", {{zip, "s.zip"}}, "", "secret-alice", &status);
  expect_refused(reply, status, "'..'");
  // 8 MiB of zeros whose central directory claims 1000 bytes: caught while inflating.
  zip = make_zip(
      skill_md +
      "z.writestr('s/bomb.bin', b'\\0' * (8 << 20))\nz.close()\n"
      "data = bytearray(open(sys.argv[1], 'rb').read())\n"
      "at = data.rfind(b'PK\\x01\\x02')\n"
      "data[at + 24:at + 28] = (1000).to_bytes(4, 'little')\n"
      "open(sys.argv[1], 'wb').write(bytes(data))\nz = zipfile.ZipFile(sys.argv[1] + '.unused', 'w')\n");
  reply = upload(server->base() + "/skills", {{zip, "s.zip"}}, "", "secret-alice", &status);
  expect_refused(reply, status, "zip bomb");
  zip = make_zip(skill_md + "z.writestr('s/zeros.bin', b'\\0' * (8 << 20))\n");
  reply = upload(server->base() + "/skills", {{zip, "s.zip"}}, "", "secret-alice", &status);
  expect_refused(reply, status, "larger than");
  // Not a zip at all.
  fs::path fake = work / "fake.zip";
  std::ofstream(fake) << "not a zip";
  reply = upload(server->base() + "/skills", {{fake, "fake.zip"}}, "", "secret-alice", &status);
  expect_refused(reply, status, "zip");
}

TEST_F(SkillsTest, BuiltinSkillsAreListed) {
  auto listing = server->curl_json(quoted(server->base() + "/skills?source=anthropic&limit=100"));
  std::set<std::string> ids;
  for (const auto& skill : listing.at("data").as_array()) {
    EXPECT_EQ(skill.at("source").at("type"), "anthropic");
    ids.insert(std::string(skill.at("id").as_string()));
  }
  for (const char* expected : {"xlsx", "docx", "pdf", "pptx", "data-analysis"})
    EXPECT_TRUE(ids.count(expected)) << expected;
  auto version = server->curl_json(quoted(server->base() + "/skills/pptx/versions/latest"));
  EXPECT_EQ(version.at("name"), "pptx");
  EXPECT_FALSE(std::string(version.at("description").as_string()).empty());
  EXPECT_EQ(server->status("-X DELETE " + quoted(server->base() + "/skills/pptx")), 400);
}

TEST_F(SkillsTest, MessagesValidation) {
  int status = 0;
  auto body = messages_body("v-c", bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "xlsx"}}});
  body["tools"] = bj::array{};
  auto reply = json(post_messages(body, &status));
  EXPECT_EQ(status, 400) << reply;
  EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find("code execution tool"),
            std::string::npos);
  bj::array nine;
  for (int i = 0; i < 9; ++i)
    nine.push_back(bj::object{{"type", "custom"}, {"skill_id", "skill_" + std::to_string(i)}});
  reply = json(post_messages(messages_body("v-c", nine), &status));
  EXPECT_EQ(status, 400) << reply;
  reply = json(post_messages(
      messages_body("v-c", bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "nope"}}}), &status));
  EXPECT_EQ(status, 404) << reply;
  EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find("'nope'"), std::string::npos)
      << reply;
  reply = json(post_messages(
      messages_body("v-c",
                    bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "pdf"}, {"version", "123"}}}),
      &status));
  EXPECT_EQ(status, 404) << reply;
  EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find("'123'"), std::string::npos)
      << reply;
}

// Without pre-started sandboxes: a sandbox started cold for a request that has skills
// sees them too.
TEST(SkillsColdStart, SkillsReachASandboxStartedForTheRequest) {
  ScriptedUpstream upstream;
  ServerProcess server("model:\n  baseUrl: \"" + upstream.base_url() +
                       "\"\n  models: { default: upstream-model }\nruntime:\n  prestartedSandboxes: 0\n");
  upstream.push_message(U::message(
      {U::tool_use("toolu_c1", "bash_code_execution", {{"command", "head -2 /mnt/skills/xlsx/SKILL.md"}})},
      "tool_use"));
  upstream.push_message(U::message({U::text_block("ok")}, "end_turn"));
  bj::object body{
      {"model", "default"},
      {"max_tokens", 100},
      {"container",
       {{"id", "cold"}, {"skills", bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "xlsx"}}}}}},
      {"tools", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_20250825"}}}},
      {"messages", bj::array{bj::object{{"role", "user"}, {"content", "go"}}}}};
  fs::path file = server.dir() / "body.json";
  std::ofstream(file) << bj::serialize(body);
  auto reply = server.curl_json("-X POST " + quoted(server.base() + "/messages") +
                                " -H 'content-type: application/json' --data-binary @" + file.string());
  ASSERT_TRUE(reply.as_object().contains("content")) << reply;
  EXPECT_EQ(reply.at("content").as_array()[1].at("content").at("stdout"), "---\nname: xlsx\n") << reply;
}

}  // namespace

namespace {

// On the default limits (30 MiB), a zip whose headers are honest but whose entry
// inflates more than 200:1 past 1 MiB is refused as a bomb, and nothing is kept.
TEST(SkillsDefaults, ZipBombByRatioIsRefused) {
  ServerProcess server;
  const fs::path zip = server.dir() / "ratio.zip";
  int status = -1;
  sh("python3 -c \"import zipfile, sys\n"
     "z = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED)\n"
     "z.writestr('s/SKILL.md', '---\\nname: s\\ndescription: d\\n---\\n')\n"
     "z.writestr('s/zeros.bin', b'\\\\0' * (20 << 20))\n"
     "z.close()\" " +
         zip.string(),
     &status);
  ASSERT_EQ(status, 0);
  ASSERT_LT(fs::file_size(zip), 100u * 1024) << "20 MiB of zeros compress to a few KiB";
  auto reply = server.curl_json("-X POST " + quoted(server.base() + "/skills") + " -F " +
                                quoted("files[]=@" + zip.string() + ";filename=s.zip"));
  ASSERT_EQ(reply.at("type"), "error") << reply;
  EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find("compression ratio"),
            std::string::npos)
      << reply;
  auto listing = server.curl_json(quoted(server.base() + "/skills?source=custom"));
  EXPECT_EQ(listing.at("data").as_array().size(), 0u);
  size_t kept = 0;
  for (const auto& entry : fs::recursive_directory_iterator(server.data_dir() / "skills"))
    kept += !entry.is_directory();
  EXPECT_EQ(kept, 0u);
}

// A container that idled out (sandbox stopped, volume and skills folder unmounted)
// loads skills again when a request opens it.
TEST(SkillsIdle, AContainerThatIdledOutLoadsSkillsAgain) {
  ScriptedUpstream upstream;
  ServerProcess server(
      "model:\n  baseUrl: \"" + upstream.base_url() +
      "\"\n  models: { default: upstream-model }\nexternal:\n  opensandbox:\n    sessionTTLSeconds: 4\n");
  auto run = [&](const std::string& id) {
    upstream.push_message(
        U::message({U::tool_use(id, "bash_code_execution",
                                {{"command", "head -2 /mnt/skills/docx/SKILL.md | tail -1"}})},
                   "tool_use"));
    upstream.push_message(U::message({U::text_block("ok")}, "end_turn"));
    bj::object body{
        {"model", "default"},
        {"max_tokens", 100},
        {"container",
         {{"id", "idle"}, {"skills", bj::array{bj::object{{"type", "anthropic"}, {"skill_id", "docx"}}}}}},
        {"tools", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_20250825"}}}},
        {"messages", bj::array{bj::object{{"role", "user"}, {"content", "go"}}}}};
    fs::path file = server.dir() / ("body-" + id + ".json");
    std::ofstream(file) << bj::serialize(body);
    auto reply = server.curl_json("-X POST " + quoted(server.base() + "/messages") +
                                  " -H 'content-type: application/json' --data-binary @" + file.string());
    EXPECT_TRUE(reply.as_object().contains("content")) << reply;
    if (reply.as_object().contains("content"))
      EXPECT_EQ(reply.at("content").as_array()[1].at("content").at("stdout"), "name: docx\n") << reply;
  };
  run("toolu_i1");
  const std::string folders = (server.data_dir() / "skill-mounts").string();
  auto mounted = [&] { return read_file("/proc/self/mountinfo").find(folders + "/") != std::string::npos; };
  ASSERT_TRUE(mounted()) << "the container's skills folder is a mount point while the container is open";
  for (int i = 0; i < 600 && mounted(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(mounted()) << "the idle container's skills folder is unmounted with its volume";
  run("toolu_i2");
}

// The deep-folder upload, from the attacker's side, at the default limits: SKILL.md
// and 999 empty files at 1,022-byte paths s/<i>/d/d/.../f (about 510 folders each, half a
// million in all from zero bytes of content), four at once. Each is refused by the folder
// bounds before it makes more than a few folders, nothing is left on the disk, and
// another owner's commands and /health are answered throughout. An upload at the bounds
// (1,000 files and folders) is stored and deleted, with the other owner answered while it
// is still being sent.
TEST(SkillsDefaults, DeepEmptyFoldersAreBoundedAndOthersAreServedMeanwhile) {
  ServerProcess server;
  const std::string boundary = "sandboxd-deep-tree-boundary";
  auto part = [&](const std::string& filename, const std::string& content) {
    return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"files[]\"; filename=\"" + filename +
           "\"\r\nContent-Type: application/octet-stream\r\n\r\n" + content + "\r\n";
  };
  const std::string skill_md = "---\nname: deep\ndescription: Deep folders.\n---\n# Deep\n";
  // The attack's body.
  {
    std::string body = part("s/SKILL.md", skill_md);
    for (int i = 0; i < 999; ++i) {
      std::string path = "s/" + std::to_string(i);
      while (path.size() + 4 <= 1020) path += "/d";
      path += "/f";
      while (path.size() < 1022) path.insert(path.size() - 2, "d");  // 1,022 bytes exactly
      ASSERT_EQ(path.size(), 1022u);
      body += part(path, "");
    }
    body += "--" + boundary + "--\r\n";
    std::ofstream(server.dir() / "deep.body", std::ios::binary) << body;
  }
  const std::string post = "-X POST '" + server.base() +
                           "/skills' -H 'Content-Type: multipart/form-data; boundary=" + boundary +
                           "' --data-binary @";
  // Bob works all along: a command and /health, again and again, until the uploads end.
  std::atomic<bool> uploading{true};
  std::atomic<int> bob_answered{0}, bob_failed{0};
  std::string bob_failure;
  std::thread bob([&] {
    int n = 0;
    while (uploading || n < 3) {
      auto echo = server.curl_json("-X POST '" + server.base() +
                                       "/containers/bob-deep/tools/bash_code_execution' -d "
                                       "'{\"command\": \"echo bob-ok\"}'",
                                   "secret-bob-x");
      const bool ok = echo.is_object() && echo.as_object().contains("stdout") &&
                      echo.at("stdout") == "bob-ok\n" && server.status(server.url("/health")) == 200;
      if (ok)
        ++bob_answered;
      else if (++bob_failed == 1)
        bob_failure = bj::serialize(echo);
      ++n;
    }
  });
  std::vector<std::thread> attackers;
  std::vector<std::string> replies(4);
  for (int i = 0; i < 4; ++i)
    attackers.emplace_back([&, i] {
      replies[i] = server.curl("-w '\\n%{http_code}' " + post + (server.dir() / "deep.body").string());
    });
  for (auto& t : attackers) t.join();
  uploading = false;
  for (const auto& reply : replies) {
    EXPECT_EQ(reply.substr(reply.rfind('\n') + 1), "400") << reply.substr(0, 400);
    EXPECT_NE(reply.find("nested deeper than 16 folders"), std::string::npos) << reply.substr(0, 400);
  }
  // Nothing of them stays: no skill, no staging folder with anything in it.
  EXPECT_TRUE(server.curl_json("'" + server.base() + "/skills?source=custom'").at("data").as_array().empty());
  auto entries_under_skills = [&] {
    size_t n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(server.data_dir() / "skills", ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      ++n;
    return n;
  };
  EXPECT_LE(entries_under_skills(), 1u) << "at most the empty staging folder";

  // At the bounds: SKILL.md and 62 files, each under a chain of 15 folders of its own
  // (s/<i>/d/.../d/f.txt, 16 deep): 931 folders and 63 files, 994 entries: stored.
  {
    std::string body = part("s/SKILL.md", skill_md);
    for (int i = 0; i < 62; ++i) {
      std::string path = "s/" + std::to_string(i);
      for (int d = 0; d < 14; ++d) path += "/d";
      body += part(path + "/f.txt", "x");
    }
    body += "--" + boundary + "--\r\n";
    std::ofstream(server.dir() / "bounded.body", std::ios::binary) << body;
  }
  // Sent slowly (about 12 KB at 2 KiB/s), so that Bob's work is checked while it is
  // still being received and stored.
  std::atomic<bool> sending{true};
  std::string stored;
  std::thread slow([&] {
    stored = server.curl("--limit-rate 2k " + post + (server.dir() / "bounded.body").string());
    sending = false;
  });
  int answered_while_sending = 0;
  while (sending) {
    auto echo = server.curl_json("-X POST '" + server.base() +
                                     "/containers/bob-deep/tools/bash_code_execution' -d "
                                     "'{\"command\": \"echo bob-ok\"}'",
                                 "secret-bob-x");
    const bool ok = echo.at("stdout") == "bob-ok\n" && server.status(server.url("/health")) == 200;
    if (ok && sending) ++answered_while_sending;
    EXPECT_TRUE(ok) << bj::serialize(echo);
  }
  slow.join();
  bob.join();
  EXPECT_EQ(bob_failed.load(), 0) << bob_failure;
  EXPECT_GE(bob_answered.load(), 3);
  EXPECT_GE(answered_while_sending, 1) << "Bob was answered while the upload was still in progress";
  auto skill = json(stored);
  ASSERT_EQ(skill.at("type"), "skill") << stored.substr(0, 400);
  const std::string id(skill.at("id").as_string());
  EXPECT_GE(entries_under_skills(), 993u);
  EXPECT_EQ(server.status("-X DELETE '" + server.base() + "/skills/" + id + "'"), 200);
  EXPECT_LE(entries_under_skills(), 2u) << "the skill's folders went with it";
  server.curl("-X DELETE '" + server.base() + "/containers/bob-deep'", "secret-bob-x");
}

}  // namespace
