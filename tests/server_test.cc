// End to end over HTTP against a real `sandboxd serve` on loopback: the contract's curl
// commands themselves, every endpoint of the containers, tools, files and thread
// surfaces, their documented errors, and hostile input.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <future>
#include <regex>

#include "eventually.h"
#include "http_client.h"
#include "server_harness.h"
#include "shared_server_suite.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

class ServerTest : public SharedServerSuite {
 protected:
  static void SetUpTestSuite() { start_server("server:\n  maxUploadSize: 4Mi\n  headerTimeoutSec: 2\n"); }
  void SetUp() override { name_container("t"); }
  // '<base>/files<path>?scope_id=<container>[&query]': `suffix` is a path ("/key"), a
  // query ("?a=b" or "&a=b"), or a path followed by a query.
  std::string files(const std::string& suffix = "") const {
    std::string path = suffix, query;
    if (auto q = suffix.find_first_of("?&"); q != std::string::npos) {
      path = suffix.substr(0, q);
      query = "&" + suffix.substr(q + 1);
    }
    return "'" + server->base() + "/files" + path + "?scope_id=" + container + query + "'";
  }
  bj::object bash(const std::string& command, const std::string& extra = "") {
    bj::object input{{"command", command}};
    std::string body = bj::serialize(input);
    if (!extra.empty()) body = body.substr(0, body.size() - 1) + "," + extra + "}";
    std::ofstream(*work / "body.json") << body;
    return server
        ->curl_json("-X POST " + server->base() + "/containers/" + container +
                    "/tools/bash_code_execution -d @" + (*work / "body.json").string())
        .as_object();
  }
  bj::object editor(const bj::object& input) {
    std::ofstream(*work / "body.json") << bj::serialize(input);
    return server
        ->curl_json("-X POST " + server->base() + "/containers/" + container +
                    "/tools/text_editor_code_execution -d @" + (*work / "body.json").string())
        .as_object();
  }
  std::string in_work(const std::string& name, const std::string& content) {
    std::ofstream(*work / name, std::ios::binary) << content;
    return (*work / name).string();
  }
};

// --- the contract's "Work with files", its curl commands ----------------------------

TEST_F(ServerTest, SeedUploadListDownloadDelete) {
  std::string csv = in_work("sales.csv", "month,revenue\n1,100\n2,250\n");
  std::string H = "-H 'Authorization: Bearer secret-alice' ";
  std::string BASE = server->base();
  // curl -X POST "https://{BASE_URL}/api/gpt/v1/files?scope_id=my-container" -H ... -F "file=@sales.csv"
  auto uploaded = json(sh("cd " + work->string() + " && curl -s -X POST \"" + BASE +
                          "/files?scope_id=" + container + "\" " + H + "-F \"file=@sales.csv\""));
  auto& up = uploaded.as_object();
  EXPECT_EQ(up.at("id"), "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y");
  EXPECT_EQ(up.at("filename"), "sales.csv");
  EXPECT_EQ(up.at("mime_type"), "text/csv");
  EXPECT_EQ(up.at("size_bytes").as_int64(), 26);
  EXPECT_EQ(up.at("type"), "file");
  EXPECT_EQ(up.at("downloadable"), false);
  EXPECT_EQ(up.at("etag").as_string(), sh("md5sum " + csv + " | cut -d' ' -f1 | tr -d '\\n'"));
  EXPECT_EQ(up.at("namespace"), "session");
  EXPECT_EQ(up.at("scope"), (bj::object{{"id", container}, {"type", "session"}}));
  EXPECT_TRUE(std::regex_match(std::string(up.at("created_at").as_string()),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));

  // ...&path=data/2026/q3.xlsx  -> /mnt/user-data/uploads/data/2026/q3.xlsx
  auto keyed =
      json(sh("cd " + work->string() + " && curl -s -X POST \"" + BASE + "/files?scope_id=" + container +
              "&path=data/2026/q3.xlsx\" " + H + "-F \"file=@sales.csv\""));
  EXPECT_EQ(keyed.at("id").as_string(),
            sh("printf '/mnt/user-data/uploads/data/2026/q3.xlsx' | base64 | tr '+/' '-_' | tr -d '=\\n'"));
  // curl -X PUT ".../files/config/settings.json?scope_id=..." -H "Content-Type: application/json"
  // --data-binary @settings.json
  in_work("settings.json", "{\"setting\": \"value\"}");
  auto put = json(sh("cd " + work->string() + " && curl -s -X PUT \"" + BASE +
                     "/files/config/settings.json?scope_id=" + container + "\" " + H +
                     "-H \"Content-Type: application/json\" --data-binary @settings.json"));
  EXPECT_EQ(put.at("filename"), "settings.json");
  EXPECT_EQ(put.at("mime_type"), "application/json");

  // The sandbox sees them; code writes an output.
  auto ls = bash(
      "cat /mnt/user-data/uploads/sales.csv /mnt/user-data/uploads/data/2026/q3.xlsx | wc -l; "
      "ls -la /mnt/user-data/uploads/sales.csv | awk '{print $3, $4}'; "
      "printf 'PNGDATA' > /mnt/user-data/outputs/revenue.png");
  EXPECT_EQ(ls.at("stdout"), "6\nagent agent\n") << bj::serialize(ls);

  // List: uploads and outputs, sorted by creation time.
  auto listed = json(sh("curl -s \"" + BASE + "/files?scope_id=" + container + "\" " + H));
  auto& data = listed.at("data").as_array();
  ASSERT_EQ(data.size(), 4u) << listed;
  EXPECT_EQ(data[0].at("filename"), "sales.csv");
  EXPECT_EQ(data[3].at("filename"), "revenue.png");
  EXPECT_EQ(data[3].at("downloadable"), true);
  EXPECT_EQ(data[3].at("mime_type"), "image/png");
  EXPECT_EQ(listed.at("first_id"), data[0].at("id"));
  EXPECT_EQ(listed.at("last_id"), data[3].at("id"));
  EXPECT_EQ(listed.at("has_more"), false);

  // Download with an id computed the way the contract shows.
  std::string file_id =
      sh("printf '/mnt/user-data/outputs/revenue.png' | base64 | tr '+/' '-_' | tr -d '=' | tr -d '\\n'");
  EXPECT_EQ(file_id, std::string(data[3].at("id").as_string()));
  sh("cd " + work->string() + " && curl -s \"" + BASE + "/files/" + file_id +
     "/content?scope_id=" + container + "\" " + H + "-o revenue.png");
  EXPECT_EQ(read_file(*work / "revenue.png"), "PNGDATA");
  // Uploads are not downloadable: 403.
  EXPECT_EQ(server->status(files("/L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y/content")), 403);

  // Delete one, then a prefix.
  auto deleted =
      json(sh("curl -s -X DELETE \"" + BASE +
              "/files/L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y?scope_id=" + container + "\" " + H));
  EXPECT_EQ(deleted,
            (bj::object{{"id", "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y"}, {"type", "file_deleted"}}));
  auto prefix =
      json(sh("curl -s -X DELETE \"" + BASE + "/files?scope_id=" + container + "&prefix=data/2026/\" " + H));
  EXPECT_EQ(prefix, (bj::object{{"prefix", "data/2026/"}, {"deleted_count", 1}, {"type", "prefix_deleted"}}));
  auto after = bash("ls /mnt/user-data/uploads /mnt/user-data/uploads/data/2026 | tr '\\n' ' '");
  EXPECT_EQ(after.at("stdout"), "/mnt/user-data/uploads: config data  /mnt/user-data/uploads/data/2026: ");
}

// A client computes a file's id from its sandbox path the way the seed shows (Python's
// urlsafe base64 without padding) and sandboxd answers to exactly that id for a file
// that code wrote, in its listing and its metadata.
TEST_F(ServerTest, FileIdsAreThePathsBase64urlAsAClientComputesThem) {
  ASSERT_EQ(bash("echo chart > /mnt/user-data/outputs/revenue.png").at("return_code"), 0);
  auto client_id =
      sh("python3 -c \"import base64; print(base64.urlsafe_b64encode(b'/mnt/user-data/outputs/revenue.png')"
         ".decode().rstrip('='), end='')\"");
  ASSERT_EQ(client_id, "L21udC91c2VyLWRhdGEvb3V0cHV0cy9yZXZlbnVlLnBuZw");
  auto meta = server->curl_json(files("/" + client_id)).as_object();
  EXPECT_EQ(std::string(meta.at("id").as_string()), client_id);
  EXPECT_EQ(meta.at("filename"), "revenue.png");
  auto listing = server->curl_json(files()).as_object();
  bool listed = false;
  for (const auto& file : listing.at("data").as_array()) listed |= file.at("id").as_string() == client_id;
  EXPECT_TRUE(listed) << bj::serialize(listing);
  EXPECT_EQ(server->curl(files("/" + client_id + "/content")), "chart\n");
}

// --- containers and direct execution ------------------------------------------------

TEST_F(ServerTest, ContainerLifecycle) {
  auto created =
      server->curl_json("-X POST " + server->base() + "/containers -d '{\"id\":\"" + container + "\"}'");
  EXPECT_EQ(created.at("id").as_string(), container);
  EXPECT_EQ(created.at("state"), "stopped");
  auto assigned = server->curl_json("-X POST " + server->base() + "/containers");
  EXPECT_EQ(std::string(assigned.at("id").as_string()).rfind("cntr_", 0), 0u);
  bash("echo 1 > f.txt");
  auto got = server->curl_json(server->base() + "/containers/" + container);
  EXPECT_EQ(got.at("state"), "running");
  EXPECT_EQ(got.at("usage").at("files"), 1);
  EXPECT_EQ(got.at("usage").at("bytes"), 2);
  auto listed = server->curl_json(server->base() + "/containers?limit=1000");
  bool found = false;
  for (auto& c : listed.at("data").as_array()) found |= c.at("id").as_string() == container;
  EXPECT_TRUE(found);
  auto stopped = server->curl_json("-X POST " + server->base() + "/containers/" + container + "/stop");
  EXPECT_EQ(stopped.at("state"), "stopped");
  EXPECT_EQ(bash("cat f.txt").at("stdout"), "1\n") << "files kept across stop";
  auto deleted = server->curl_json("-X DELETE " + server->base() + "/containers/" + container);
  EXPECT_EQ(deleted, (bj::object{{"id", container}, {"type", "container_deleted"}}));
  EXPECT_EQ(server->status(server->base() + "/containers/" + container), 404);
  EXPECT_EQ(bash("ls | wc -l").at("stdout"), "0\n") << "a deleted container comes back empty";
}

TEST_F(ServerTest, AnotherOwnersContainerAnswersExactlyLikeAMissingOne) {
  bash("echo alice-secret > s.txt");
  std::string missing = server->curl(server->base() + "/containers/no-such-container-xyz", "secret-bob-x");
  std::string foreign = server->curl(server->base() + "/containers/" + container, "secret-bob-x");
  EXPECT_EQ(foreign, std::regex_replace(missing, std::regex("no-such-container-xyz"), container));
  EXPECT_EQ(server->status(files(), "secret-bob-x"), 404);
  // Bob using the same id gets his own, empty container.
  auto bobs = server->curl_json("-X POST " + server->base() + "/containers/" + container +
                                    "/tools/bash_code_execution -d '{\"command\":\"ls; cat s.txt\"}'",
                                "secret-bob-x");
  EXPECT_EQ(bobs.at("stdout"), "");
  EXPECT_NE(std::string(bobs.at("stderr").as_string()).find("No such file"), std::string::npos);
  EXPECT_EQ(bash("cat s.txt").at("stdout"), "alice-secret\n");
}

TEST_F(ServerTest, BashResultsTimeoutsAndRestart) {
  auto r = bash("echo out; echo err >&2; exit 3");
  EXPECT_EQ(r, (bj::object{{"type", "bash_code_execution_result"},
                           {"stdout", "out\n"},
                           {"stderr", "err\n"},
                           {"return_code", 3},
                           {"content", bj::array{}}}));
  auto t = bash("sleep 30", "\"timeout\": 1");
  EXPECT_EQ(t.at("return_code"), 124);
  EXPECT_EQ(t.at("stderr"), "Command timed out after 1s.");
  auto bad = bash("printf '\\xff\\xfeok'");
  EXPECT_EQ(bad.at("stdout"), "\xEF\xBF\xBD\xEF\xBF\xBDok") << "invalid UTF-8 becomes U+FFFD";
  bash("echo w > w.txt; echo o > /mnt/user-data/outputs/o.txt; sleep 300 >/dev/null 2>&1 &");
  sh("curl -s -X PUT " + files("/u.txt") + " -H 'Authorization: Bearer secret-alice' -d up");
  auto restarted = bash("ls; cat /mnt/user-data/outputs/o.txt /mnt/user-data/uploads/u.txt; pgrep -c sleep",
                        "\"restart\": true");
  EXPECT_EQ(restarted.at("stdout"), "o\nup0\n") << bj::serialize(restarted);
  auto invalid = server->curl_json("-X POST " + server->base() + "/containers/" + container +
                                   "/tools/bash_code_execution -d '{\"command\": 5}'");
  EXPECT_EQ(invalid.at("type"), "bash_code_execution_tool_result_error");
  EXPECT_EQ(invalid.at("error_code"), "invalid_tool_input");
}

TEST_F(ServerTest, TextEditorThroughTheApi) {
  auto created = editor({{"command", "create"},
                         {"path", "config.json"},
                         {"file_text", "{\n  \"setting\": \"value\",\n  \"debug\": true\n}"}});
  EXPECT_EQ(created,
            (bj::object{{"type", "text_editor_code_execution_create_result"}, {"is_file_update", false}}));
  auto replaced = editor({{"command", "str_replace"},
                          {"path", "/home/agent/workspace/config.json"},
                          {"old_str", "\"debug\": true"},
                          {"new_str", "\"debug\": false"}});
  EXPECT_EQ(replaced, (bj::object{{"type", "text_editor_code_execution_str_replace_result"},
                                  {"old_start", 3},
                                  {"old_lines", 1},
                                  {"new_start", 3},
                                  {"new_lines", 1},
                                  {"lines", bj::array{"-  \"debug\": true", "+  \"debug\": false"}}}));
  auto viewed = editor({{"command", "view"}, {"path", "config.json"}});
  EXPECT_EQ(viewed, (bj::object{{"type", "text_editor_code_execution_view_result"},
                                {"file_type", "text"},
                                {"content", "{\n  \"setting\": \"value\",\n  \"debug\": false\n}"},
                                {"num_lines", 4},
                                {"start_line", 1},
                                {"total_lines", 4}}));
  EXPECT_EQ(bash("cat config.json | grep debug; ls -l config.json | awk '{print $3}'").at("stdout"),
            "  \"debug\": false\nagent\n");
  auto missing = editor({{"command", "view"}, {"path", "/home/agent/workspace/missing.txt"}});
  EXPECT_EQ(missing, (bj::object{{"type", "text_editor_code_execution_tool_result_error"},
                                 {"error_code", "unavailable"},
                                 {"error_message", "File not found: /home/agent/workspace/missing.txt"},
                                 {"detail",
                                  {{"code", "unavailable"},
                                   {"explanation", "File not found: /home/agent/workspace/missing.txt"}}}}));
  auto readonly =
      editor({{"command", "create"}, {"path", "/mnt/user-data/uploads/x.txt"}, {"file_text", "x"}});
  EXPECT_EQ(readonly.at("detail").at("explanation"),
            "Path '/mnt/user-data/uploads/x.txt' is in a read-only mount");
  auto nowhere = editor({{"command", "view"}, {"path", "/etc/passwd"}});
  EXPECT_EQ(nowhere.at("detail").at("explanation"), "Path '/etc/passwd' does not match any session mount");
}

// --- files: hostile input -----------------------------------------------------------

TEST_F(ServerTest, KeyRulesRejectTraversalAndJunk) {
  for (std::string key : std::vector<std::string>{"%2Fetc%2Fpasswd", "a/../../x", "..", "a/%2e%2e/x",
                                                  "a/%252e%252e/x", "a/%2E%2e/b", "dir/", "a//b", "a/./b",
                                                  "x%00y", "x%0Ay", "x%7Fy", std::string(5000, 'k')}) {
    // --path-as-is: curl would otherwise fold the dot segments itself.
    EXPECT_EQ(server->status("--path-as-is -X PUT " + files("/" + key) + " -d x"), 400) << key.substr(0, 40);
  }
  auto body = server->curl("-X PUT " + files("/a/%2e%2e/x") + " -d x");
  EXPECT_EQ(json(body).at("type"), "error");
  EXPECT_EQ(json(body).at("error").at("type"), "invalid_request_error");
  EXPECT_EQ(server->status("-X POST " + files("?path=/abs/x") + " -F file=@/etc/hostname"), 400);
  EXPECT_EQ(server->status("-X POST " + files("?path=../x") + " -F file=@/etc/hostname"), 400);
  EXPECT_EQ(bash("find /mnt/user-data -type f | wc -l").at("stdout"), "0\n");
}

TEST_F(ServerTest, SymlinksMadeByCodeNeverLeadOutside) {
  bash(
      "ln -s /etc/passwd /mnt/user-data/outputs/passwd; ln -s / /mnt/user-data/outputs/root; "
      "ln -s /etc /mnt/user-data/outputs/etc; ln -s /etc/passwd leak.txt");
  auto id = [](const std::string& path) {
    return sh("printf '" + path + "' | base64 -w0 | tr '+/' '-_' | tr -d '='");
  };
  for (std::string path : {"/mnt/user-data/outputs/passwd", "/mnt/user-data/outputs/root/etc/passwd",
                           "/mnt/user-data/outputs/etc/passwd", "/home/agent/workspace/leak.txt"}) {
    std::string body = server->curl(files("/" + id(path) + "/content"));
    EXPECT_EQ(body.find("root:"), std::string::npos) << path << " leaked: " << body.substr(0, 100);
    EXPECT_GE(server->status(files("/" + id(path))), 400) << path;
  }
  EXPECT_GE(server->status("-X PUT " + files("/outputs/etc/sandboxd-pwned") + " -d x"), 400);
  EXPECT_FALSE(fs::exists("/etc/sandboxd-pwned"));
  EXPECT_GE(server->status("-X PUT " + files("/outputs/root/tmp/sandboxd-pwned") + " -d x"), 400);
  EXPECT_FALSE(fs::exists("/tmp/sandboxd-pwned"));
  std::string thread_dl = server->curl(
      server->url("/api/v1/app/thread/" + container + "/download-file?path=/mnt/user-data/outputs/passwd"));
  EXPECT_EQ(thread_dl.find("root:"), std::string::npos);
  // The listing does not follow them either.
  auto listed = server->curl_json(files());
  EXPECT_EQ(listed.at("data").as_array().size(), 0u) << listed;
}

TEST_F(ServerTest, ContentRangeEtagAndDisposition) {
  bash("printf '0123456789' > /mnt/user-data/outputs/digits.txt");
  std::string id = sh("printf '/mnt/user-data/outputs/digits.txt' | base64 -w0 | tr '+/' '-_' | tr -d '='");
  std::string url = files("/" + id + "/content");
  EXPECT_EQ(server->curl(url + " -H 'Range: bytes=2-5'"), "2345");
  EXPECT_EQ(server->status(url + " -H 'Range: bytes=2-5'"), 206);
  EXPECT_EQ(server->curl(url + " -H 'Range: bytes=-3'"), "789");
  EXPECT_EQ(server->curl(url + " -H 'Range: bytes=7-'"), "789");
  EXPECT_EQ(server->status(url + " -H 'Range: bytes=20-30'"), 416);
  std::string headers = server->curl("-D - -o /dev/null " + url + " -H 'Range: bytes=20-30'");
  EXPECT_NE(headers.find("Content-Range: bytes */10"), std::string::npos) << headers;
  std::string etag = server->curl_json(files("/" + id)).at("etag").as_string().c_str();
  EXPECT_EQ(etag, sh("printf 0123456789 | md5sum | cut -d' ' -f1 | tr -d '\\n'"));
  EXPECT_EQ(server->status(url + " -H 'If-None-Match: \"" + etag + "\"'"), 304);
  EXPECT_EQ(server->status(url + " -H 'If-None-Match: \"other\"'"), 200);
  std::string inline_headers = server->curl("-D - -o /dev/null '" + server->base() + "/files/" + id +
                                            "/content?scope_id=" + container + "&disposition=inline'");
  EXPECT_NE(inline_headers.find("Content-Disposition: inline; filename=\"digits.txt\""), std::string::npos)
      << inline_headers;
  std::string head = server->curl("-I " + files("/" + id));
  for (const char* header :
       {"X-File-Id: ", "X-File-Filename: digits.txt", "X-File-Mime-Type: text/plain", "X-File-Size-Bytes: 10",
        "X-File-Created-At: ", "X-File-Downloadable: true", "X-File-Etag: "})
    EXPECT_NE(head.find(header), std::string::npos) << header << "\n" << head;
  std::string missing =
      sh("printf '/mnt/user-data/outputs/missing.txt' | base64 -w0 | tr '+/' '-_' | tr -d '='");
  EXPECT_EQ(server->status("-I " + files("/" + missing)), 404);
  EXPECT_EQ(server->status("-I " + files("/" + id.substr(0, 10) + "AAAA")), 400) << "not the id of a path";
}

TEST_F(ServerTest, ListingPagesAndPrefixes) {
  for (int i = 0; i < 5; ++i)
    sh("curl -s -X PUT " + files("/p/" + std::to_string(i) + ".txt") +
       " -H 'Authorization: Bearer secret-alice' -d " + std::to_string(i));
  sh("curl -s -X PUT " + files("/outputs/o.txt") + " -H 'Authorization: Bearer secret-alice' -d o");
  auto page1 = server->curl_json(files("&limit=2"));
  ASSERT_EQ(page1.at("data").as_array().size(), 2u);
  EXPECT_EQ(page1.at("has_more"), true);
  auto page2 = server->curl_json(files("&limit=2&after_id=" + std::string(page1.at("last_id").as_string())));
  EXPECT_EQ(page2.at("data").at(0).at("filename"), "2.txt");
  auto back = server->curl_json(files("&limit=2&before_id=" + std::string(page2.at("first_id").as_string())));
  EXPECT_EQ(back.at("data").at(0).at("filename"), "0.txt");
  EXPECT_EQ(server->curl_json(files("&prefix=p/")).at("data").as_array().size(), 5u);
  auto outputs = server->curl_json(files("&prefix=outputs/"));
  ASSERT_EQ(outputs.at("data").as_array().size(), 1u);
  EXPECT_EQ(outputs.at("data").at(0).at("downloadable"), true);
  EXPECT_EQ(server->status(files("&limit=0")), 400);
  EXPECT_EQ(server->status(files("&limit=1001")), 400);
  EXPECT_EQ(server->status(files("&after_id=%2F%2F%2F")), 400);
}

TEST_F(ServerTest, UploadLimitsAndMalformedBodies) {
  std::string big = (*work / "big.bin").string();
  sh("head -c 5M /dev/zero > " + big);
  EXPECT_EQ(server->status("-X PUT " + files("/big.bin") + " --data-binary @" + big), 413);
  EXPECT_EQ(server->status("-X POST " + files() + " -F file=@" + big), 413);
  EXPECT_EQ(server->status("-X POST " + files() + " -H 'Content-Type: text/plain' -d hello"), 400);
  EXPECT_EQ(server->status("-X POST " + files() +
                           " -H 'Content-Type: multipart/form-data; boundary=XX' --data-binary 'garbage'"),
            400);
  EXPECT_EQ(server->status("-X POST " + files() + " -F other=@/etc/hostname"), 400);
  EXPECT_EQ(server->status("-X POST " + server->base() + "/containers -d '{bad json'"), 400);
  EXPECT_EQ(server->status("-X POST " + server->base() + "/containers/x/tools/bash_code_execution -d '[1]'"),
            400);
  EXPECT_EQ(server->status(server->base() + "/files"), 400) << "scope_id is required";
  EXPECT_EQ(bash("ls /mnt/user-data/uploads | wc -l").at("stdout"), "0\n");
}

TEST_F(ServerTest, AFailedUploadKeepsThePreviousVersion) {
  sh("curl -s -X PUT " + files("/keep.txt") + " -H 'Authorization: Bearer secret-alice' -d original");
  std::string big = (*work / "big2.bin").string();
  sh("head -c 5M /dev/urandom > " + big);
  EXPECT_EQ(server->status("-X PUT " + files("/keep.txt") + " --data-binary @" + big), 413);
  EXPECT_EQ(bash("cat /mnt/user-data/uploads/keep.txt").at("stdout"), "original");
  // A client that disconnects mid-body.
  sh("timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(server->port()) +
     "; "
     "printf \"PUT /api/gpt/v1/files/keep.txt?scope_id=" +
     container +
     " HTTP/1.1\\r\\nHost: x\\r\\n"
     "Authorization: Bearer secret-alice\\r\\nContent-Length: 1000000\\r\\n\\r\\npartial\" >&3; sleep 0.3'");
  // The server notices the cut body and removes what it had received.
  EXPECT_TRUE(eventually([&] {
    return bash("cat /mnt/user-data/uploads/keep.txt; ls -a /mnt/user-data/uploads | grep -c tmp")
               .at("stdout") == "original0\n";
  }));
}

TEST_F(ServerTest, ConcurrentUploadsToOneKeyNeverTear) {
  std::string a = (*work / "a.bin").string(), b = (*work / "b.bin").string();
  sh("head -c 2M /dev/zero | tr '\\0' a > " + a + "; head -c 2M /dev/zero | tr '\\0' b > " + b);
  std::string cmd;
  for (int i = 0; i < 6; ++i)
    cmd += "curl -s -o /dev/null -X PUT " + files("/same.bin") +
           " -H 'Authorization: Bearer secret-alice' --data-binary @" + (i % 2 ? a : b) + " & ";
  sh(cmd + "wait");
  auto r = bash(
      "tr -d a < /mnt/user-data/uploads/same.bin | wc -c; tr -d b < /mnt/user-data/uploads/same.bin | wc -c; "
      "wc -c < /mnt/user-data/uploads/same.bin");
  std::string out(r.at("stdout").as_string());
  EXPECT_TRUE(out == "0\n2097152\n2097152\n" || out == "2097152\n0\n2097152\n") << out;
}

// --- thread endpoints -----------------------------------------------------------------

TEST_F(ServerTest, ThreadFilesFollowTheOrganisationSettings) {
  std::string thread = server->url("/api/v1/app/thread/" + container);
  in_work("sales.csv", "a,b\n");
  auto up =
      server->curl_json("-X POST " + thread + "/upload-file -F file=@" + (*work / "sales.csv").string());
  EXPECT_EQ(up.at("id"), "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y");
  auto put = server->curl_json("-X PUT " + thread + "/put-file/outputs/chart.txt --data-binary chart");
  EXPECT_EQ(put.at("downloadable"), true);
  EXPECT_EQ(server->curl(thread + "/download-file?path=/mnt/user-data/outputs/chart.txt"), "chart");
  EXPECT_EQ(server->status(thread + "/download-file?path=/mnt/user-data/uploads/sales.csv"), 403)
      << "uploaded-resource downloads are off by default";
  EXPECT_EQ(server->status(thread + "/download-file?path=/home/agent/workspace/x"), 403);
  EXPECT_EQ(server->status(thread + "/download-file?path=/etc/passwd"), 400);
  EXPECT_EQ(server->status(thread + "/download-file?path=/mnt/user-data/outputs/none.txt"), 404);
  EXPECT_EQ(server->status(server->url(
                "/api/v1/app/thread/other-thread-xyz/download-file?path=/mnt/user-data/outputs/chart.txt")),
            404);
}

TEST(ServerSettings, UploadedResourceDownloadsWhenEnabled) {
  ServerProcess server(
      "workspace:\n  downloads:\n    generatedResources: false\n    uploadedResources: true\n");
  std::string thread = server.url("/api/v1/app/thread/t1");
  server.curl("-X PUT " + thread + "/put-file/in.txt --data-binary hello");
  server.curl("-X PUT " + thread + "/put-file/outputs/out.txt --data-binary out");
  EXPECT_EQ(server.curl(thread + "/download-file?path=/mnt/user-data/uploads/in.txt"), "hello");
  EXPECT_EQ(server.status(thread + "/download-file?path=/mnt/user-data/outputs/out.txt"), 403);
}

// Bodies many times the writer's ring of buffers (8 MiB), each way a body arrives: sized
// (read straight into the writer's buffers, after 100-continue), chunked and multipart
// (copied in). The etag is the MD5 of the bytes and the stored file is the body.
TEST(ServerUploads, LargeBodiesAreHashedAndStoredWhole) {
  ServerProcess server(
      "server:\n  maxUploadSize: 64Mi\nworkspace:\n  downloads:\n    uploadedResources: true\n");
  const std::string body = (server.dir() / "body.bin").string(), back = (server.dir() / "back.bin").string();
  sh("head -c 25166601 /dev/urandom > " + body);  // 24 MiB and an unaligned tail
  const std::string md5 = sh("md5sum " + body + " | cut -d' ' -f1 | tr -d '\\n'");
  const std::string files = server.base() + "/files", thread = server.url("/api/v1/app/thread/big");
  const std::vector<std::pair<std::string, std::string>> uploads = {
      {"sized.bin", "-X PUT '" + files + "/sized.bin?scope_id=big' -T " + body},
      {"chunked.bin",
       "-X PUT '" + files + "/chunked.bin?scope_id=big' -H 'Transfer-Encoding: chunked' -T " + body},
      {"multi.bin", "-X POST '" + files + "?scope_id=big' -F 'file=@" + body + ";filename=multi.bin'"}};
  for (const auto& [name, args] : uploads) {
    auto uploaded = json(server.curl(args));
    ASSERT_TRUE(uploaded.is_object()) << name;
    EXPECT_EQ(uploaded.at("filename").as_string(), name);
    EXPECT_EQ(uploaded.at("size_bytes").as_int64(), 25166601) << name;
    EXPECT_EQ(uploaded.at("etag").as_string(), md5) << name;
    server.curl("-o " + back + " '" + thread + "/download-file?path=/mnt/user-data/uploads/" + name + "'");
    EXPECT_EQ(sh("cmp " + body + " " + back + " && echo same"), "same\n") << name;
  }
}

// --- transport ------------------------------------------------------------------------

TEST_F(ServerTest, RoutingAuthAndRequestIds) {
  EXPECT_EQ(server->status(server->url("/nope")), 404);
  EXPECT_EQ(server->status("-X PATCH " + server->base() + "/containers"), 405);
  std::string headers = server->curl("-D - -o /dev/null -X PATCH " + server->base() + "/containers");
  EXPECT_NE(headers.find("Allow: POST, GET"), std::string::npos) << headers;
  EXPECT_TRUE(std::regex_search(headers, std::regex("request-id: req_[A-Za-z0-9]{24}"))) << headers;
  EXPECT_EQ(server->status(server->base() + "/containers", "wrong-token"), 401);
  auto unauth = json(sh("curl -s " + server->base() + "/containers"));
  EXPECT_EQ(unauth.at("error").at("type"), "authentication_error");
  EXPECT_EQ(std::stoi(sh("curl -s -o /dev/null -w '%{http_code}' -H 'x-api-key: secret-alice' " +
                         server->base() + "/containers")),
            200);
  EXPECT_EQ(std::stoi(sh("curl -s -o /dev/null -w '%{http_code}' " + server->url("/health"))), 200);
}

// The server remembers the token a connection authenticated with: each request on a
// kept-alive connection is still its own token's owner's, and a wrong token of the same
// length is refused, whatever came before it on the connection.
TEST_F(ServerTest, EachRequestOnAKeptAliveConnectionIsItsOwnTokensOwner) {
  bash("echo alice-secret > s.txt");
  sandboxd::testing::HttpClient client(server->port(), "secret-alice");
  const std::string target = "/api/gpt/v1/containers/" + container + "/tools/bash_code_execution";
  const std::string body = R"({"command":"cat s.txt"})";
  auto as = [&](const std::string& token) {
    return client.post(target, body, "application/json", {{"Authorization", "Bearer " + token}});
  };
  auto alice = as("secret-alice");
  ASSERT_EQ(alice.status, 200u) << alice.body;
  EXPECT_EQ(json(alice.body).at("stdout"), "alice-secret\n");
  EXPECT_EQ(as("secret-alicf").status, 401u) << "a token one byte off the connection's";
  EXPECT_EQ(as("secret-alice").status, 200u);
  auto bob = as("secret-bob-x");  // bob's own container of that id: no s.txt in it
  ASSERT_EQ(bob.status, 200u) << bob.body;
  EXPECT_EQ(json(bob.body).at("stdout"), "");
  EXPECT_EQ(as("secret-bob-x-and-more").status, 401u);
  EXPECT_EQ(json(as("secret-alice").body).at("stdout"), "alice-secret\n");
}

TEST_F(ServerTest, HugeHeadersAndSlowlorisCostNothing) {
  std::string huge(20000, 'h');
  EXPECT_EQ(server->status("-H 'X-Big: " + huge + "' " + server->base() + "/containers"), 431);
  // A client that never finishes its header is dropped after headerTimeoutSec (2 s).
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_GT(send(sock, "GET /health HTTP/1.1\r\nHost: x\r\n", 31, 0), 0);
  // Meanwhile the server keeps serving others.
  EXPECT_EQ(std::stoi(sh("curl -s -o /dev/null -w '%{http_code}' " + server->url("/health"))), 200);
  timeval tv{6, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[16];
  auto start = std::chrono::steady_clock::now();
  ssize_t n = recv(sock, buf, sizeof buf, 0);
  auto waited = std::chrono::steady_clock::now() - start;
  close(sock);
  EXPECT_EQ(n, 0) << "the server closed the connection";
  EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST(ServerLifecycle, GracefulShutdownLeavesNothingAndFilesSurvive) {
  auto server = std::make_unique<ServerProcess>();
  server->curl("-X POST " + server->base() +
               "/containers/c1/tools/bash_code_execution -d '{\"command\":\"echo kept > k.txt; sleep 6001 "
               ">/dev/null 2>&1 &\"}'");
  server->curl("-X PUT '" + server->base() + "/files/up.txt?scope_id=c1' --data-binary up");
  std::string data = server->data_dir().string();
  EXPECT_NE(sh("grep -c " + data + " /proc/mounts"), "0\n");
  EXPECT_EQ(server->stop(SIGTERM), 0);
  EXPECT_EQ(sh("grep -c " + data + " /proc/mounts"), "0\n") << "volumes unmounted";
  // (Each test's sleep has a length of its own: the host's process table is shared with
  // the tests that run beside this one.)
  EXPECT_EQ(sh("pgrep -f 'slee[p] 6001' | wc -l"), "0\n") << "sandbox processes gone";
  server->start();
  auto r = server->curl_json("-X POST " + server->base() +
                             "/containers/c1/tools/bash_code_execution -d '{\"command\":\"cat k.txt "
                             "/mnt/user-data/uploads/up.txt\"}'");
  EXPECT_EQ(r.at("stdout"), "kept\nup");
}

TEST(ServerLifecycle, ARequestOnAKeptAliveConnectionDuringTheDrainIsRefusedWithARetry) {
  ServerProcess server;
  // A connection kept alive after one answer (as a proxy's or a relay's pool keeps it).
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{10, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto exchange = [&](const std::string& request) {
    EXPECT_EQ(send(sock, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    std::string answer;
    char buf[4096];
    for (;;) {  // until the body named by Content-Length is in
      ssize_t n = recv(sock, buf, sizeof buf, 0);
      if (n <= 0) break;
      answer.append(buf, static_cast<size_t>(n));
      auto end = answer.find("\r\n\r\n");
      std::smatch length;
      if (end != std::string::npos &&
          std::regex_search(answer, length, std::regex("Content-Length: ([0-9]+)")) &&
          answer.size() >= end + 4 + std::stoul(length[1]))
        break;
    }
    return answer;
  };
  EXPECT_EQ(exchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  // A command in flight holds the drain open; SIGTERM starts it.
  auto in_flight = std::async(std::launch::async, [&] {
    return server.curl_json("-X POST " + server.base() +
                            "/containers/d1/tools/bash_code_execution -d "
                            "'{\"command\":\"sleep 2.31; echo finished\"}'");
  });
  // (The sandbox's own sleep, not the curl whose command line carries the same words.)
  for (int i = 0; i < 200 && sh("pgrep -f '^sleep 2[.]31$' | wc -l") == "0\n"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(server.pid(), SIGTERM);
  for (int i = 0; i < 200 && server.log().find("shutting down") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // A request arriving on the kept-alive connection now gets an answer: a 503 with a
  // retry, and the connection's end (never a silent close).
  const std::string body = "{\"command\":\"echo never\"}";
  std::string refused = exchange(
      "POST /api/gpt/v1/containers/d1/tools/bash_code_execution HTTP/1.1\r\nHost: x\r\n"
      "Authorization: Bearer secret-alice\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Connection: close"), std::string::npos) << refused;
  EXPECT_NE(refused.find("\"overloaded_error\""), std::string::npos) << refused;
  char rest;
  EXPECT_EQ(recv(sock, &rest, 1, 0), 0) << "the server closed the connection after its answer";
  close(sock);
  // The one in flight ran to its end, and nothing else ran.
  EXPECT_EQ(in_flight.get().at("stdout"), "finished\n");
  EXPECT_EQ(server.stop(SIGTERM), 0);
  const std::string log = server.log();
  size_t executions = 0;
  for (size_t at = 0; (at = log.find("execution owner=alice container=d1 ", at)) != std::string::npos; ++at)
    ++executions;
  EXPECT_EQ(executions, 1u) << log;
}

TEST(ServerLifecycle, TheNamespaceSandboxesAreMadeFromPinsNoOneElsesVolume) {
  // Another service's volume, mounted on the host before the server starts (when the
  // template sandboxes are made from is taken): unmounting it later must free its loop
  // device at once, the template holding no copy of that mount.
  std::string pattern = (fs::temp_directory_path() / "sandboxd-pin-XXXXXX").string();
  const fs::path dir = mkdtemp(pattern.data());
  const std::string image = (dir / "vol.img").string(), point = (dir / "mnt").string();
  fs::create_directories(point);
  sh("truncate -s 16M " + image + " && mkfs.ext4 -q -F " + image + " && mount -o loop " + image + " " +
     point);
  ASSERT_NE(sh("losetup -j " + image), "") << "the loop device of the other volume";
  {
    ServerProcess server;
    auto ran = server.curl_json(
        "-X POST " + server.base() +
        "/containers/pin/tools/bash_code_execution -d "
        "'{\"command\":\"echo made > /mnt/user-data/outputs/o.txt; cat /mnt/user-data/outputs/o.txt\"}'");
    EXPECT_EQ(ran.at("stdout"), "made\n");
    // The sandbox sees nothing of it either.
    auto looked = server.curl_json("-X POST " + server.base() +
                                   "/containers/pin/tools/bash_code_execution -d "
                                   "'{\"command\":\"ls " +
                                   point + " 2>&1 | head -c 200; grep -c " + dir.string() +
                                   " /proc/self/mountinfo\"}'");
    EXPECT_NE(std::string(looked.at("stdout").as_string()).find("No such file"), std::string::npos) << looked;
    EXPECT_EQ(sh("umount " + point + " && echo unmounted"), "unmounted\n");
    std::string left;
    for (int i = 0; i < 50; ++i) {
      left = sh("losetup -j " + image);
      if (left.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(left, "") << "the loop device is still held while the server runs";
  }
  fs::remove_all(dir);
}

TEST(ServerLifecycle, KillDashNineLosesNoAcknowledgedFile) {
  ServerProcess server;
  server.curl("-X PUT '" + server.base() + "/files/doc.txt?scope_id=c1' --data-binary version-1");
  server.curl("-X POST " + server.base() +
              "/containers/c1/tools/bash_code_execution -d '{\"command\":\"sleep 6002 >/dev/null 2>&1 &\"}'");
  // An upload in flight when the server dies.
  sh("head -c 3M /dev/urandom > " + (server.dir() / "slow.bin").string());
  sh("(curl -s --limit-rate 200k -X PUT '" + server.base() +
     "/files/doc.txt?scope_id=c1' -H 'Authorization: Bearer secret-alice' "
     "--data-binary @" +
     (server.dir() / "slow.bin").string() + " >/dev/null 2>&1 &)");
  // The upload is in flight: its connection has authenticated and its body is coming.
  ASSERT_TRUE(
      eventually([&] { return server.metric("sandboxd_http_connections{state=\"authenticated\"}") >= 1; }));
  server.stop(SIGKILL);
  server.start();
  // The container's sandbox and the pre-started ones.
  EXPECT_TRUE(std::regex_search(server.log(), std::regex("removed [1-9][0-9]* sandbox"))) << server.log();
  // What the chart's SandboxdLeftoversAfterRestart alert watches.
  EXPECT_GE(server.metric("sandboxd_leftovers_removed_total"), 1);
  EXPECT_EQ(sh("pgrep -f 'slee[p] 6002' | wc -l"), "0\n");
  std::string id = sh("printf '/mnt/user-data/uploads/doc.txt' | base64 -w0 | tr '+/' '-_' | tr -d '='");
  auto meta = server.curl_json("'" + server.base() + "/files/" + id + "?scope_id=c1'");
  EXPECT_EQ(meta.at("size_bytes"), 9);
  auto r = server.curl_json(
      "-X POST " + server.base() +
      "/containers/c1/tools/bash_code_execution -d '{\"command\":\"cat /mnt/user-data/uploads/doc.txt\"}'");
  EXPECT_EQ(r.at("stdout"), "version-1");
}

}  // namespace

namespace {

TEST(ServerLifecycle, IdleSandboxesStopAfterTheTtlAndKeepTheirFiles) {
  ServerProcess server("external:\n  opensandbox:\n    sessionTTLSeconds: 2\n");
  auto run = [&](const std::string& command) {
    return server.curl_json("-X POST " + server.base() +
                            "/containers/idle/tools/bash_code_execution -d '{\"command\":\"" + command +
                            "\"}'");
  };
  run("echo kept > k.txt; sleep 6003 >/dev/null 2>&1 &");
  auto running = server.curl_json(server.base() + "/containers/idle");
  EXPECT_EQ(running.at("state"), "running");
  std::string expires = std::string(running.at("expires_at").as_string());
  EXPECT_TRUE(eventually([&] {
    return sh("pgrep -f 'slee[p] 6003' | wc -l") == "0\n" &&
           sh("grep -c " + server.data_dir().string() + "/containers /proc/mounts") == "0\n";
  }));
  EXPECT_EQ(sh("pgrep -f 'slee[p] 6003' | wc -l"), "0\n") << "the idle sandbox was stopped";
  EXPECT_EQ(sh("grep -c " + server.data_dir().string() + "/containers /proc/mounts"), "0\n")
      << "and its volume unmounted";
  auto stopped = server.curl_json(server.base() + "/containers/idle");
  EXPECT_EQ(stopped.at("state"), "stopped");
  EXPECT_GT(std::string(stopped.at("expires_at").as_string()), expires) << "expires_at rolls with activity";
  EXPECT_EQ(run("cat k.txt; pgrep -c sleep").at("stdout"), "kept\n0\n");
}

}  // namespace
