// metadata.backend: postgres end to end: a real `sandboxd serve` on loopback with its
// metadata in a real PostgreSQL (started by the test): files uploaded, listed,
// downloaded and deleted, a thread created and listed, then the server restarted and
// everything still there; and the configuration keys checked with their paths.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "postgres_harness.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

std::string metadata_yaml(const std::string& url) {
  return "metadata:\n  backend: postgres\n  postgres:\n    url: \"" + url +
         "\"\nruntime:\n  provider: none\nworkspace:\n  downloads:\n    uploadedResources: true\n";
}

int64_t count_rows(const std::string& url, const std::string& table) {
  auto database = sandboxd::store::db::open_postgres(url, 1);
  auto conn = database->acquire();
  sandboxd::store::db::Statement count(conn, "SELECT COUNT(*) FROM " + table);
  return count.step() ? count.integer(0) : -1;
}

TEST(MetadataBackend, PostgresKeepsFilesAndThreadsAcrossARestart) {
  const std::string url = PostgresEnvironment::server().create_database();
  ServerProcess server(metadata_yaml(url));
  // A thread; its files are those of the container with its id.
  auto thread =
      server.curl_json("-X POST '" + server.url("/api/v1/app/thread") + "' -d '{\"title\": \"Q3 sales\"}'");
  ASSERT_EQ(thread.at("type"), "thread") << thread;
  const std::string thread_id(thread.at("id").as_string());
  const std::string container = thread_id;
  // Downloads of uploads go through the thread's endpoint (uploadedResources: true).
  auto download = [&](const std::string& path) {
    return server.curl("'" + server.url("/api/v1/app/thread/" + thread_id + "/download-file?path=" + path) +
                       "'");
  };
  auto files = [&](const std::string& suffix = "", const std::string& query = "") {
    return "'" + server.base() + "/files" + suffix + "?scope_id=" + container + query + "'";
  };
  const fs::path csv = server.dir() / "sales.csv";
  std::ofstream(csv, std::ios::binary) << "month,revenue\n1,100\n2,250\n";

  auto uploaded = server.curl_json("-X POST " + files() + " -F 'file=@" + csv.string() + "'");
  ASSERT_EQ(uploaded.at("filename"), "sales.csv") << uploaded;
  const std::string sales_id(uploaded.at("id").as_string());
  auto put = server.curl_json("-X PUT " + files("/notes/todo.txt") + " --data-binary 'buy milk'");
  ASSERT_EQ(put.at("filename"), "todo.txt") << put;
  const std::string todo_id(put.at("id").as_string());
  auto extra = server.curl_json("-X PUT " + files("/notes/extra.txt") + " --data-binary 'x'");
  ASSERT_EQ(extra.at("filename"), "extra.txt") << extra;

  auto listed = server.curl_json(files());
  ASSERT_EQ(listed.at("data").as_array().size(), 3u) << listed;
  EXPECT_EQ(listed.at("data").as_array()[0].at("id").as_string(), sales_id);  // by creation
  EXPECT_EQ(download("/mnt/user-data/uploads/sales.csv"), "month,revenue\n1,100\n2,250\n");
  auto deleted = server.curl_json("-X DELETE " + files("/" + std::string(extra.at("id").as_string())));
  EXPECT_EQ(deleted.at("type"), "file_deleted") << deleted;
  EXPECT_EQ(server.status(files("/" + std::string(extra.at("id").as_string()))), 404);

  // The index is in PostgreSQL, not in a SQLite file beside the data.
  EXPECT_EQ(count_rows(url, "files"), 2);
  EXPECT_EQ(count_rows(url, "threads"), 1);
  EXPECT_FALSE(fs::exists(server.data_dir() / "sandboxd.db"));

  // A restart, with the URL from the environment this time (it wins over the file's).
  server.write_config(metadata_yaml("postgresql://nobody@127.0.0.1:1/nothing"));
  setenv("SANDBOXD_POSTGRES_URL", url.c_str(), 1);
  server.restart();
  unsetenv("SANDBOXD_POSTGRES_URL");

  auto relisted = server.curl_json(files());
  ASSERT_EQ(relisted.at("data").as_array().size(), 2u) << relisted;
  EXPECT_EQ(relisted.at("data").as_array()[0].at("id").as_string(), sales_id);
  EXPECT_EQ(relisted.at("data").as_array()[1].at("id").as_string(), todo_id);
  EXPECT_EQ(download("/mnt/user-data/uploads/sales.csv"), "month,revenue\n1,100\n2,250\n");
  EXPECT_EQ(download("/mnt/user-data/uploads/notes/todo.txt"), "buy milk");
  auto threads = server.curl_json("'" + server.url("/api/v1/app/thread") + "'");
  ASSERT_EQ(threads.at("data").as_array().size(), 1u) << threads;
  EXPECT_EQ(threads.at("data").as_array()[0].at("id").as_string(), thread_id);
  EXPECT_EQ(threads.at("data").as_array()[0].at("title"), "Q3 sales");
  // A thread id that is not UTF-8 is just not found (PostgreSQL could not take it).
  EXPECT_EQ(server.status("'" + server.url("/api/v1/app/thread/thread_%FF%FE") + "'"), 404);
}

// Every surface whose store calls run off the I/O threads on PostgreSQL (service/store_call.h),
// by 8 clients at once, each in its own container and thread: uploads under a stored-bytes
// quota (the charge reads the previous version), listings, a file's metadata, deletions,
// the container list, the thread calls and the skills list. Each client checks what it
// gets back; the database holds exactly what is left.
TEST(MetadataBackend, PostgresServesEverySurfaceToConcurrentClients) {
  const std::string url = PostgresEnvironment::server().create_database();
  ServerProcess server(metadata_yaml(url) + "quotas:\n  storedBytesPerOwner: 1Mi\n");
  constexpr int kClients = 8;
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&server, i] {
      const std::string container = "pg-c" + std::to_string(i);
      auto files = [&](const std::string& suffix = "", const std::string& query = "") {
        return "'" + server.base() + "/files" + suffix + "?scope_id=" + container + query + "'";
      };
      std::string kept_id;
      for (int n = 0; n < 4; ++n) {
        auto put = server.curl_json("-X PUT " + files("/dir/f" + std::to_string(n) + ".txt") +
                                    " --data-binary 'v1'");
        EXPECT_EQ(put.at("filename").as_string(), "f" + std::to_string(n) + ".txt") << put;
        // The same key again: a new version, charged against the old one.
        put = server.curl_json("-X PUT " + files("/dir/f" + std::to_string(n) + ".txt") +
                               " --data-binary 'v2!'");
        EXPECT_EQ(put.at("size_bytes"), 3) << put;
        if (n == 0) kept_id = std::string(put.at("id").as_string());
      }
      auto listed = server.curl_json(files("", "&limit=2"));
      EXPECT_EQ(listed.at("data").as_array().size(), 2u) << listed;
      EXPECT_EQ(listed.at("has_more"), true) << listed;
      auto one = server.curl_json(files("/" + kept_id));
      EXPECT_EQ(one.at("etag"), "c67a9ca5f84c1f187c62ef4d51387bef") << one;  // MD5 of "v2!"
      auto deleted = server.curl_json("-X DELETE " + files("/" + kept_id));
      EXPECT_EQ(deleted.at("type"), "file_deleted") << deleted;
      EXPECT_EQ(server.status(files("/" + kept_id)), 404);
      auto by_prefix = server.curl_json("-X DELETE " + files("", "&prefix=dir/f1"));
      EXPECT_EQ(by_prefix.at("deleted_count"), 1) << by_prefix;
      EXPECT_EQ(server.curl_json(files()).at("data").as_array().size(), 2u);

      auto thread = server.curl_json("-X POST '" + server.url("/api/v1/app/thread") +
                                     "' -d '{\"title\": \"t" + std::to_string(i) + "\"}'");
      EXPECT_EQ(thread.at("type"), "thread") << thread;
      const std::string thread_url =
          server.url("/api/v1/app/thread/" + std::string(thread.at("id").as_string()));
      auto renamed = server.curl_json("-X PATCH '" + thread_url + "' -d '{\"title\": \"renamed\"}'");
      EXPECT_EQ(renamed.at("title"), "renamed") << renamed;
      auto got = server.curl_json("'" + thread_url + "'");
      EXPECT_EQ(got.at("title"), "renamed") << got;
      EXPECT_TRUE(got.at("messages").as_array().empty()) << got;
      auto artifacts = server.curl_json("'" + thread_url + "/artifacts'");
      EXPECT_TRUE(artifacts.at("data").as_array().empty()) << artifacts;
      auto removed = server.curl_json("-X DELETE '" + thread_url + "'");
      EXPECT_EQ(removed.at("type"), "thread_deleted") << removed;
      EXPECT_EQ(server.status("'" + thread_url + "'"), 404);
      EXPECT_EQ(server.status("'" + server.base() + "/skills'"), 200);
    });
  for (auto& client : clients) client.join();

  auto containers = server.curl_json("'" + server.base() + "/containers?limit=100'");
  size_t mine = 0;
  for (const auto& c : containers.at("data").as_array())
    if (std::string(c.at("id").as_string()).starts_with("pg-c")) ++mine;
  EXPECT_EQ(mine, static_cast<size_t>(kClients)) << containers;
  auto threads = server.curl_json("'" + server.url("/api/v1/app/thread") + "'");
  EXPECT_TRUE(threads.at("data").as_array().empty()) << threads;
  EXPECT_EQ(count_rows(url, "files"), 2 * kClients);
  EXPECT_EQ(count_rows(url, "threads"), 0);
  // The server stayed healthy throughout (no request failed on a store call).
  EXPECT_EQ(server.log().find("metadata: a background write failed"), std::string::npos) << server.log();
}

// The file records a server holds in memory (store/file_cache.h), on each backend, with
// a real sandbox: what the Files API and a command write is listed at once, a file
// deleted either way is never listed or found again, and another owner's container of
// the same id never shows them. A row written behind the server's back (no other
// process writes a single host's metadata) is not listed: the listing came from memory.
class FileRecordsInMemory : public ::testing::TestWithParam<sandboxd::store::db::Backend> {};

TEST_P(FileRecordsInMemory, FollowTheApiAndCommandsAndStayTheOwners) {
  const bool postgres = GetParam() == sandboxd::store::db::Backend::kPostgres;
  const std::string url = postgres ? PostgresEnvironment::server().create_database() : "";
  ServerProcess server(postgres ? "metadata:\n  backend: postgres\n  postgres:\n    url: \"" + url + "\"\n"
                                : "");
  auto files = [&](const std::string& suffix = "", const std::string& query = "") {
    return "'" + server.base() + "/files" + suffix + "?scope_id=mem" + query + "'";
  };
  auto names = [&](const std::string& token = "secret-alice") {
    std::vector<std::string> out;
    auto listed = server.curl_json(files(), token);
    for (const auto& file : listed.at("data").as_array()) out.emplace_back(file.at("filename").as_string());
    return out;
  };
  auto bash = [&](const std::string& command) {
    const fs::path body = server.dir() / "command.json";
    std::ofstream(body) << bj::serialize(bj::object{{"command", command}});
    return server.curl_json("-X POST '" + server.base() + "/containers/mem/tools/bash_code_execution' -d @" +
                            body.string());
  };

  auto a = server.curl_json("-X PUT " + files("/a.txt") + " --data-binary 'alpha'");
  const std::string a_id(a.at("id").as_string());
  EXPECT_EQ(names(), (std::vector<std::string>{"a.txt"}));  // the records are held from here on

  // A command writes an output: the next listing shows it.
  auto ran = bash("echo out > /mnt/user-data/outputs/out.txt");
  ASSERT_EQ(ran.at("return_code"), 0) << ran;
  EXPECT_EQ(names(), (std::vector<std::string>{"a.txt", "out.txt"}));
  auto listed = server.curl_json(files());
  const std::string out_id(listed.at("data").as_array()[1].at("id").as_string());
  EXPECT_EQ(server.curl_json(files("/" + out_id)).at("size_bytes"), 4);
  // One that deletes it and writes another: the deleted one is never listed or found.
  ran = bash("rm /mnt/user-data/outputs/out.txt && echo new > /mnt/user-data/outputs/new.txt");
  ASSERT_EQ(ran.at("return_code"), 0) << ran;
  EXPECT_EQ(names(), (std::vector<std::string>{"a.txt", "new.txt"}));
  EXPECT_EQ(server.status(files("/" + out_id)), 404);

  // The API's own writes: an upload, a delete.
  auto b = server.curl_json("-X PUT " + files("/b.txt") + " --data-binary 'beta'");
  EXPECT_EQ(names(), (std::vector<std::string>{"a.txt", "new.txt", "b.txt"}));
  EXPECT_EQ(server.curl_json("-X DELETE " + files("/" + a_id)).at("type"), "file_deleted");
  EXPECT_EQ(names(), (std::vector<std::string>{"new.txt", "b.txt"}));
  EXPECT_EQ(server.status(files("/" + a_id)), 404);
  // A command that rewrites an output: its new size at once.
  listed = server.curl_json(files());
  const std::string new_id(listed.at("data").as_array()[0].at("id").as_string());
  ASSERT_EQ(bash("printf 'new, longer' > /mnt/user-data/outputs/new.txt").at("return_code"), 0);
  EXPECT_EQ(server.curl_json(files("/" + new_id)).at("size_bytes"), 11);

  // Another owner's container of the same id: none of it.
  EXPECT_EQ(server.status(files(), "secret-bob-x"), 404);
  server.curl_json("-X PUT " + files("/bobs.txt") + " --data-binary 'b'", "secret-bob-x");
  EXPECT_EQ(names("secret-bob-x"), (std::vector<std::string>{"bobs.txt"}));
  EXPECT_EQ(server.status(files("/" + std::string(b.at("id").as_string())), "secret-bob-x"), 404);
  EXPECT_EQ(names(), (std::vector<std::string>{"new.txt", "b.txt"}));

  // A row written behind the server's back is not listed: the listing is from memory.
  auto database = postgres ? sandboxd::store::db::open_postgres(url, 1)
                           : sandboxd::store::db::open_sqlite((server.data_dir() / "sandboxd.db").string());
  {
    auto conn = database->acquire();
    sandboxd::store::db::Statement insert(
        conn,
        "INSERT INTO files (storage, path, created_at, seq, size, etag, mime, mtime_ns) SELECT storage, ?, "
        "1, "
        "-1, 1, 'e', 'text/plain', 1 FROM containers WHERE owner = 'alice' AND id = 'mem'");
    insert.bind_blob(1, "/mnt/user-data/uploads/behind.txt").run();
    ASSERT_EQ(insert.changes(), 1);
  }
  EXPECT_EQ(names(), (std::vector<std::string>{"new.txt", "b.txt"}));
}

INSTANTIATE_TEST_SUITE_P(Backends, FileRecordsInMemory,
                         ::testing::Values(sandboxd::store::db::Backend::kSqlite,
                                           sandboxd::store::db::Backend::kPostgres),
                         backend_name);

TEST(MetadataBackend, AnUnreachableDatabaseStopsTheStartWithTheReason) {
  ServerProcess* server = nullptr;
  const std::string url =
      "postgresql://postgres@127.0.0.1:" + std::to_string(free_loopback_port()) + "/nothing";
  try {
    server = new ServerProcess(metadata_yaml(url));
    ADD_FAILURE() << "the server started without its database";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("postgres: connect"), std::string::npos) << e.what();
  }
  delete server;
  // The start that failed left nothing mounted: its data directory's private bind came
  // off on the way out (found by the configuration that names this database).
  std::ifstream info("/proc/self/mountinfo");
  std::set<std::string> mounted;
  for (std::string line; std::getline(info, line);) {
    std::istringstream fields(line);
    std::string skip, point;
    fields >> skip >> skip >> skip >> skip >> point;
    if (point.find("/sandboxd-e2e-") == std::string::npos || !point.ends_with("/data")) continue;
    mounted.insert(point);
    std::ifstream config(fs::path(point).parent_path() / "config.yaml");
    std::stringstream text;
    text << config.rdbuf();
    EXPECT_EQ(text.str().find(url), std::string::npos) << "still mounted: " << point;
  }
  // (The harness keeps the folder of a server that never started; this test's goes.)
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path())) {
    if (entry.path().filename().string().rfind("sandboxd-e2e-", 0) != 0) continue;
    std::ifstream config(entry.path() / "config.yaml");
    std::stringstream text;
    text << config.rdbuf();
    if (text.str().find(url) != std::string::npos && !mounted.count((entry.path() / "data").string()))
      fs::remove_all(entry.path());
  }
}

TEST(MetadataBackend, ConfigurationKeysAreCheckedWithTheirPath) {
  auto check = [](const std::string& yaml) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-metacfg-XXXXXX").string();
    fs::path dir = mkdtemp(pattern.data());
    std::ofstream(dir / "c.yaml") << yaml;
    int status = 0;
    std::string out = sh("env -u SANDBOXD_POSTGRES_URL " + std::string(SANDBOXD_PATH) + " config check " +
                             (dir / "c.yaml").string() + " 2>&1",
                         &status);
    fs::remove_all(dir);
    return std::make_pair(status, out);
  };
  EXPECT_EQ(check("metadata:\n  backend: sqlite\n").first, 0);
  EXPECT_EQ(check("metadata:\n  backend: postgres\n  postgres:\n    url: postgresql://h/db\n").first, 0);
  auto no_url = check("metadata:\n  backend: postgres\n");
  EXPECT_NE(no_url.first, 0);
  EXPECT_NE(no_url.second.find("metadata.postgres.url"), std::string::npos) << no_url.second;
  auto wrong = check("metadata:\n  backend: mysql\n");
  EXPECT_NE(wrong.first, 0);
  EXPECT_NE(wrong.second.find("metadata.backend"), std::string::npos) << wrong.second;
  auto unknown = check("metadata:\n  postgres:\n    host: x\n");
  EXPECT_NE(unknown.first, 0);
  EXPECT_NE(unknown.second.find("metadata.postgres.host"), std::string::npos) << unknown.second;
  // The URL may come from the environment alone.
  int status = 0;
  std::string pattern = (fs::temp_directory_path() / "sandboxd-metacfg-XXXXXX").string();
  fs::path dir = mkdtemp(pattern.data());
  std::ofstream(dir / "c.yaml") << "metadata:\n  backend: postgres\n";
  sh("SANDBOXD_POSTGRES_URL=postgresql://h/db " + std::string(SANDBOXD_PATH) + " config check " +
         (dir / "c.yaml").string(),
     &status);
  fs::remove_all(dir);
  EXPECT_EQ(status, 0);
}

}  // namespace
