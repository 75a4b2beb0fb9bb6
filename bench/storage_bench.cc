// Storage benchmark (docs/benchmarks.md), over HTTP on loopback: real `sandboxd serve`
// processes and a real S3 server (s3rver from tests/s3/package-lock.json, `npm ci
// --prefix tests/s3`), each started here. Prints figures beside their references with
// the ratio; asserts nothing.
//   1. cold (a new container: sandbox start + `true`) and warm (`true` in a running
//      sandbox) with storage.backend s3 against local, the two servers side by side;
//   2. restoring a container of 1,000 files / 100 MiB (written by a command, flushed by
//      a stop, the local copy wiped) on its first command, against curl downloading the
//      same objects from s3rver one after another on one connection (as the restore does);
//   3. a 1 GiB upload through sandboxd to the bucket against `curl -T` of the same file
//      straight to s3rver (s3rver writes both to its own disk): a PUT (one streamed PUT
//      to the bucket) and a form POST (a multipart upload) against curl -T and against
//      curl's multipart upload in 8 MiB parts;
//   4. two replicas sharing the metadata file and the bucket (leaseSeconds 3): the holder
//      killed with SIGKILL, the time until the other serves a command in its container,
//      split into the restore (the survivor's restore histogram) and the rest (the
//      lease running out, the 503s meanwhile, a sandbox start).
//   usage: sandboxd_storage_bench [SANDBOXD_BINARY]
//   SANDBOXD_BENCH_STORAGE_RUNS=N   uploads per side in part 3 (median; default 3)

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "http_client.h"
#include "loopback.h"
#include "s3_server.h"

namespace fs = std::filesystem;
using namespace sandboxd::bench;
using sandboxd::testing::HttpClient;
using sandboxd::testing::S3Server;

namespace {

const char* kToken = "bench-token-123";
const std::string kTools = "/api/gpt/v1/containers/";

// popen `command`, its stdout.
std::string shell(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  std::string out;
  char buf[65536];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (p) pclose(p);
  return out;
}

double seconds_of(const std::function<void()>& f) {
  auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One `sandboxd serve` on a port of its own, its configuration, data and log in `dir`.
class Server {
 public:
  Server(std::string binary, fs::path dir, std::string extra_yaml)
      : binary_(std::move(binary)), dir_(std::move(dir)), port_(sandboxd::testing::free_loopback_port()) {
    fs::create_directories(dir_ / "data");
    std::ofstream(dir_ / "config.yaml")
        << "server:\n  listen: \"127.0.0.1:" << port_ << "\"\n  dataDir: \"" << (dir_ / "data").string()
        << "\"\n  maxUploadSize: 2Gi\n"
        << "auth:\n  tokens:\n    - { token: " << kToken << ", owner: bench }\n"
        << "codeInterpreter:\n  workspaceSizeLimit: 512Mi\n"
        << extra_yaml;
  }
  ~Server() { stop(SIGTERM); }

  bool start() {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = (dir_ / "server.log").string(), config = (dir_ / "config.yaml").string();
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    char* argv[] = {binary_.data(), const_cast<char*>("serve"), const_cast<char*>("--config"),
                    const_cast<char*>(config.c_str()), nullptr};
    posix_spawn(&pid_, argv[0], &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 1000; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) break;
      if (shell("curl -s -o /dev/null -w '%{http_code}' " + url("/health")) == "200") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::fprintf(stderr, "sandboxd did not start:\n%s\n", read_all(dir_ / "server.log").c_str());
    pid_ = -1;
    return false;
  }
  void stop(int signo) {
    if (pid_ <= 0) return;
    kill(pid_, signo);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int port() const { return port_; }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  const fs::path& dir() const { return dir_; }
  fs::path data() const { return dir_ / "data"; }
  // A counter or histogram sample from /metrics (0 when absent).
  double metric(const std::string& name) const {
    std::string text = "\n" + shell("curl -s " + url("/metrics"));
    auto at = text.find("\n" + name + " ");
    return at == std::string::npos ? 0 : std::stod(text.substr(at + name.size() + 2));
  }

 private:
  std::string binary_;
  fs::path dir_;
  int port_;
  pid_t pid_ = -1;
};

// A bash call counts when its reply is a 200 whose command exited 0 with `expected` on stdout.
bool executed(const HttpClient::Reply& reply, const std::string& expected = "") {
  if (reply.status != 200) return false;
  boost::system::error_code ec;
  auto value = boost::json::parse(reply.body, ec);
  if (ec || !value.is_object()) return false;
  const auto* out = value.as_object().if_contains("stdout");
  const auto* code = value.as_object().if_contains("return_code");
  return out && out->is_string() && out->as_string() == expected && code && code->is_int64() &&
         code->as_int64() == 0;
}

HttpClient::Reply bash(HttpClient& client, const std::string& container, const std::string& command) {
  return client.post(kTools + container + "/tools/bash_code_execution",
                     boost::json::serialize(boost::json::object{{"command", command}, {"timeout", 300}}));
}

// curl signed as s3rver's user, the payload unsigned (as sandboxd sends it).
std::string s3_curl() {
  return std::string("curl -sS --aws-sigv4 aws:amz:us-east-1:s3 -u ") + S3Server::kAccessKey + ":" +
         S3Server::kSecretKey + " -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' ";
}

// Every key under `prefix` in the sessions bucket (ListObjectsV2, page by page).
std::vector<std::string> list_keys(const S3Server& s3, const std::string& prefix) {
  std::vector<std::string> keys;
  std::string token;
  const std::regex key("<Key>([^<]*)</Key>"), next("<NextContinuationToken>([^<]*)</NextContinuationToken>");
  for (;;) {
    std::string query = "-G --data-urlencode list-type=2 --data-urlencode 'prefix=" + prefix + "'";
    if (!token.empty()) query += " --data-urlencode 'continuation-token=" + token + "'";
    std::string xml = shell(s3_curl() + query + " '" + s3.endpoint() + "/" + S3Server::kBucket + "'");
    for (std::sregex_iterator it(xml.begin(), xml.end(), key), end; it != end; ++it) keys.push_back((*it)[1]);
    std::smatch m;
    if (xml.find("<IsTruncated>true</IsTruncated>") == std::string::npos || !std::regex_search(xml, m, next))
      break;
    token = m[1];
  }
  return keys;
}

const char* kRatioNote = "(ratio: sandboxd / reference)";

}  // namespace

int main(int argc, char** argv) {
  std::string binary = argc > 1 ? argv[1] : SANDBOXD_PATH;
  std::string pattern = (fs::current_path() / "bench-storage-XXXXXX").string();  // same disk as the build
  const fs::path dir = mkdtemp(pattern.data());
  setenv("TMPDIR", dir.c_str(), 1);  // s3rver's objects on this disk too
  std::printf("sandboxd storage benchmark (storage.backend s3 against s3rver on loopback, %ld cores) %s\n",
              sysconf(_SC_NPROCESSORS_ONLN), kRatioNote);
  {
    S3Server s3(S3Server::Signatures::kUnverified);  // s3rver alone: no verifier hop in the numbers
    Server local(binary, dir / "local", "");
    // sandboxd's default partSize (the tests' storage section has S3's smallest), as the
    // curl multipart reference of part 3 uses.
    std::string bucketed_yaml = s3.storage_yaml("bench/");
    bucketed_yaml.replace(bucketed_yaml.find("partSize: 5Mi"), 13, "partSize: 8Mi");
    Server bucketed(binary, dir / "s3", bucketed_yaml);
    if (!local.start() || !bucketed.start()) return 1;
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the pools fill

    // --- 1. cold and warm, s3 against local ------------------------------------------
    {
      HttpClient to_local(local.port(), kToken), to_s3(bucketed.port(), kToken);
      const int colds = env_int("SANDBOXD_BENCH_STORAGE_COLD", 30),
                warms = env_int("SANDBOXD_BENCH_STORAGE_WARM", 200);
      std::vector<double> cold_local, cold_s3, warm_local, warm_s3;
      int failed = 0;
      auto timed = [&](HttpClient& client, const std::string& container, std::vector<double>& samples) {
        auto start = Clock::now();
        auto reply = bash(client, container, "true");
        double ms = ms_since(start);
        if (executed(reply))
          samples.push_back(ms);
        else if (++failed < 5)
          std::fprintf(stderr, "%s: %u %s\n", container.c_str(), reply.status, reply.body.c_str());
      };
      // Alternating between the servers, so that the machine's noise falls on both.
      for (int i = 0; i < colds; ++i) {
        timed(to_local, "cold-" + std::to_string(i), cold_local);
        timed(to_s3, "cold-" + std::to_string(i), cold_s3);
        std::this_thread::sleep_for(std::chrono::milliseconds(40));  // the pools refill
      }
      bash(to_local, "warm", "true");
      bash(to_s3, "warm", "true");
      for (int i = 0; i < warms; ++i) {
        timed(to_local, "warm", warm_local);
        timed(to_s3, "warm", warm_s3);
      }
      Stats cl = summarize(cold_local), cs = summarize(cold_s3), wl = summarize(warm_local),
            ws = summarize(warm_s3);
      std::printf("\n1. executions over HTTP, `true` (alternating between the two servers)\n");
      print_row("cold (new container), storage local", cl);
      print_row("cold (new container), storage s3", cs);
      print_row("warm (running sandbox), storage local", wl);
      print_row("warm (running sandbox), storage s3", ws);
      std::printf("    cold s3 / local   p50 %5.2fx (%+.2f ms)  p99 %5.2fx   (goal: +<= 2 ms)\n",
                  cs.p50_ms / cl.p50_ms, cs.p50_ms - cl.p50_ms, cs.p99_ms / cl.p99_ms);
      std::printf("    warm s3 / local   p50 %5.2fx (%+.3f ms)  p99 %5.2fx   (goal: unchanged)\n",
                  ws.p50_ms / wl.p50_ms, ws.p50_ms - wl.p50_ms, ws.p99_ms / wl.p99_ms);
      if (failed) std::printf("    %d executions failed and are left out\n", failed);
    }

    // --- 2. restore of 1,000 files / 100 MiB --------------------------------------------
    {
      HttpClient client(bucketed.port(), kToken);
      // 1,000 files of 104,857 or 104,858 bytes: 100 MiB in all.
      auto made = bash(
          client, "restore",
          "mkdir -p d && for i in $(seq 1000); do head -c $((104857 + (i <= 600))) /dev/urandom > d/f$i; done"
          " && cat d/* | wc -c");
      if (!executed(made, std::to_string(100 << 20) + "\n"))
        std::fprintf(stderr, "restore: %s\n", made.body.c_str());
      const double flushes_before = bucketed.metric("sandboxd_storage_flushes_total{outcome=\"ok\"}");
      const double stop_s = seconds_of([&] { client.post(kTools + "restore/stop", ""); });
      const bool flushed = bucketed.metric("sandboxd_storage_flushes_total{outcome=\"ok\"}") > flushes_before;
      // The reference: the same objects from s3rver with curl, one after another on one
      // connection, each into a file of its own on this disk, synced at the end (the
      // restore syncs its volume too).
      const std::vector<std::string> keys = list_keys(s3, "bench/objects/");
      const fs::path down = dir / "curl-restore";
      fs::create_directories(down);
      std::ofstream config(dir / "curl-restore.conf");
      for (size_t i = 0; i < keys.size(); ++i)
        config << "url = \"" << s3.endpoint() << "/" << S3Server::kBucket << "/" << keys[i]
               << "\"\noutput = \"" << (down / ("f" + std::to_string(i))).string() << "\"\n";
      config.close();
      const double curl_s = seconds_of([&] {
        shell(s3_curl() + "-K " + (dir / "curl-restore.conf").string());
        shell("sync -f " + down.string());
      });
      uint64_t curl_bytes = 0;
      for (const auto& entry : fs::directory_iterator(down)) curl_bytes += entry.file_size();
      fs::remove_all(down);
      // The local copy wiped, the metadata kept: a new node, a lost disk.
      bucketed.stop(SIGTERM);
      for (const auto& entry : fs::directory_iterator(bucketed.data() / "containers"))
        fs::remove_all(entry.path());
      if (!bucketed.start()) return 1;
      HttpClient again(bucketed.port(), kToken);
      auto start = Clock::now();
      auto first = bash(again, "restore", "ls d | wc -l");
      const double first_s = ms_since(start) / 1000;
      const double restore_s = bucketed.metric("sandboxd_storage_restore_duration_seconds_sum");
      start = Clock::now();
      bash(again, "restore-reference", "true");  // a new container's first command: what is not the restore
      const double fresh_s = ms_since(start) / 1000;
      std::printf(
          "\n2. restore of a container of 1,000 files / 100 MiB (flushed by a stop in %.2f s%s; local copy "
          "wiped)\n",
          stop_s, flushed ? "" : ", NO FLUSH COUNTED");
      std::printf("  first command after the wipe     %6.2f s  (a new container's first command: %.3f s)%s\n",
                  first_s, fresh_s, executed(first, "1000\n") ? "" : "  FAILED");
      std::printf("  the restore itself (its metric)  %6.2f s  %7.1f MiB/s\n", restore_s, 100 / restore_s);
      std::printf("  curl, the %zu objects in turn     %6.2f s  %7.1f MiB/s (%.1f MiB)\n", keys.size(),
                  curl_s, curl_bytes / 1048576.0 / curl_s, curl_bytes / 1048576.0);
      std::printf("    restore / curl  %5.2fx the time   (first command / curl %5.2fx)\n", restore_s / curl_s,
                  first_s / curl_s);
    }

    // --- 3. 1 GiB upload to the bucket ---------------------------------------------------
    {
      const fs::path big = dir / "big.bin";
      shell("head -c 1G /dev/urandom > " + big.string() + " && sync");
      // The multipart peer: the file cut into 8 MiB parts beforehand (as sandboxd's
      // default partSize), then initiate, each part in turn on one connection, complete.
      const fs::path parts = dir / "parts";
      fs::create_directories(parts);
      shell("split -b 8M -d -a 3 " + big.string() + " " + (parts / "p").string() + " && sync");
      std::vector<fs::path> part_files;
      for (const auto& entry : fs::directory_iterator(parts)) part_files.push_back(entry.path());
      std::sort(part_files.begin(), part_files.end());
      const std::string multi_url = s3.endpoint() + "/" + S3Server::kBucket + "/direct/multi.bin";
      bool multipart_ok = true;
      auto multipart_upload = [&] {
        std::smatch m;
        const std::string initiated = shell(s3_curl() + "-X POST '" + multi_url + "?uploads'");
        const std::regex id_re("<UploadId>([^<]*)</UploadId>");
        if (!std::regex_search(initiated, m, id_re)) {
          multipart_ok = false;
          return;
        }
        const std::string upload_id = m[1];
        std::ofstream config(dir / "curl-parts.conf");
        for (size_t i = 0; i < part_files.size(); ++i)
          config << "url = \"" << multi_url << "?partNumber=" << i + 1 << "&uploadId=" << upload_id
                 << "\"\nupload-file = \"" << part_files[i].string() << "\"\noutput = \"/dev/null\"\n";
        config.close();
        std::istringstream etags(
            shell(s3_curl() + "-H 'Expect:' -w '%header{etag}\\n' -K " + (dir / "curl-parts.conf").string()));
        std::ofstream complete(dir / "complete.xml");
        complete << "<CompleteMultipartUpload>";
        std::string etag;
        for (size_t i = 0; i < part_files.size() && std::getline(etags, etag); ++i)
          complete << "<Part><PartNumber>" << i + 1 << "</PartNumber><ETag>" << etag << "</ETag></Part>";
        complete << "</CompleteMultipartUpload>";
        complete.close();
        const std::string done =
            shell(s3_curl() + "-X POST --data-binary @" + (dir / "complete.xml").string() + " '" + multi_url +
                  "?uploadId=" + upload_id + "'");
        multipart_ok &= done.find("CompleteMultipartUploadResult") != std::string::npos;
      };
      const int runs = env_int("SANDBOXD_BENCH_STORAGE_RUNS", 3);
      const std::string auth = std::string("Authorization: Bearer ") + kToken;
      std::vector<double> through, through_form, direct, multipart;
      std::string through_code, form_code, direct_code;
      for (int i = 0; i < runs; ++i) {
        direct.push_back(seconds_of([&] {
          direct_code = shell(s3_curl() + "-o /dev/null -w '%{http_code}' -H 'Expect:' -T " + big.string() +
                              " '" + s3.endpoint() + "/" + S3Server::kBucket + "/direct/big.bin'");
        }));
        multipart.push_back(seconds_of(multipart_upload));
        through.push_back(seconds_of([&] {
          through_code =
              shell("curl -sS -o /dev/null -w '%{http_code}' -X PUT -H '" + auth + "' -H 'Expect:' -T " +
                    big.string() + " '" + bucketed.url("/api/gpt/v1/files/big.bin?scope_id=upload") + "'");
        }));
        // A multipart/form-data body has no length of its own: an S3 multipart upload.
        through_form.push_back(seconds_of([&] {
          form_code = shell("curl -sS -o /dev/null -w '%{http_code}' -H '" + auth +
                            "' -H 'Expect:' -F file=@" + big.string() + " '" +
                            bucketed.url("/api/gpt/v1/files?scope_id=upload&path=form.bin") + "'");
        }));
      }
      fs::remove(big);
      fs::remove_all(parts);
      const double through_s = median(through), direct_s = median(direct), multipart_s = median(multipart),
                   form_s = median(through_form);
      std::printf("\n3. 1 GiB upload into the bucket (median of %d each; s3rver writes both to this disk)\n",
                  runs);
      std::printf("  curl -T straight to s3rver       %6.2f s  %7.1f MiB/s  (HTTP %s)\n", direct_s,
                  1024 / direct_s, direct_code.c_str());
      std::printf(
          "  curl, multipart in 8 MiB parts   %6.2f s  %7.1f MiB/s  (%s; s3rver writes the parts, then joins "
          "them)\n",
          multipart_s, 1024 / multipart_s, multipart_ok ? "completed" : "FAILED");
      std::printf(
          "  PUT through sandboxd (one PUT)   %6.2f s  %7.1f MiB/s  (HTTP %s; streamed as it arrives)\n",
          through_s, 1024 / through_s, through_code.c_str());
      std::printf(
          "  form POST through sandboxd       %6.2f s  %7.1f MiB/s  (HTTP %s; multipart, 8 MiB parts, 4 in "
          "flight)\n",
          form_s, 1024 / form_s, form_code.c_str());
      std::printf(
          "    sandboxd PUT / curl -T      %3.0f%% of its speed   (goal >= 70%%; the same S3 call; sandboxd "
          "also\n"
          "                                                     writes its local copy)\n",
          100 * direct_s / through_s);
      std::printf("    sandboxd form / curl -T     %3.0f%% of its speed\n", 100 * direct_s / form_s);
      std::printf("    sandboxd form / curl parts  %3.0f%% of its speed   (the same S3 calls)\n",
                  100 * multipart_s / form_s);
    }
  }

  // --- 4. a replica takes over a dead holder's container -----------------------------
  {
    S3Server s3(S3Server::Signatures::kUnverified);  // s3rver alone: no verifier hop in the numbers
    const fs::path shared = dir / "cluster-metadata.db";
    const int lease_seconds = 3;
    std::vector<std::unique_ptr<Server>> replicas;
    for (const char* id : {"replica-a", "replica-b"}) {
      auto server = std::make_unique<Server>(binary, dir / id, "");
      fs::create_symlink(shared, server->data() / "sandboxd.db");
      std::ofstream(server->dir() / "config.yaml", std::ios::app)
          << s3.storage_yaml("cluster/", 1) << "runtime:\n  prestartedSandboxes: 0\n"
          << "cluster:\n  replicaId: " << id << "\n  advertiseUrl: \"" << server->url()
          << "\"\n  leaseSeconds: " << lease_seconds << "\n  shutdownGraceSec: 10\n";
      replicas.push_back(std::move(server));
    }
    for (auto& server : replicas)
      if (!server->start()) return 1;
    Server& a = *replicas[0];
    Server& b = *replicas[1];
    HttpClient to_a(a.port(), kToken), to_b(b.port(), kToken);
    // 100 files / 10 MiB, flushed (a stop), then the sandbox running again on A.
    bash(to_a, "takeover",
         "mkdir -p d && for i in $(seq 100); do head -c 104857 /dev/urandom > d/f$i; done && echo made");
    to_a.post(kTools + "takeover/stop", "");
    auto before = bash(to_a, "takeover", "ls d | wc -l");
    const double restores_before = b.metric("sandboxd_storage_restore_duration_seconds_sum");
    a.stop(SIGKILL);
    auto killed = Clock::now();
    int refused = 0;
    HttpClient::Reply reply;
    double first_answer_s = -1;
    while (std::chrono::duration<double>(Clock::now() - killed).count() < lease_seconds + 30) {
      reply = bash(to_b, "takeover", "ls d | wc -l");
      if (reply.status == 200) break;
      if (first_answer_s < 0) first_answer_s = std::chrono::duration<double>(Clock::now() - killed).count();
      ++refused;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double takeover_s = std::chrono::duration<double>(Clock::now() - killed).count();
    const double restore_s = b.metric("sandboxd_storage_restore_duration_seconds_sum") - restores_before;
    std::printf(
        "\n4. takeover: two replicas, leaseSeconds %d, the holder killed (SIGKILL), a container of 100 files "
        "/ 10 MiB\n",
        lease_seconds);
    std::printf("  until the other replica serves a command in it  %6.2f s%s\n", takeover_s,
                executed(before, "100\n") && executed(reply, "100\n") ? "" : "  FAILED");
    std::printf("    restore (the survivor's metric)               %6.2f s\n", restore_s);
    std::printf(
        "    the rest: the lease running out (<= %d s), a sandbox start, the polling (every 20 ms; %d "
        "answers 503)\n"
        "                                                  %6.2f s\n",
        lease_seconds, refused, takeover_s - restore_s);
    // A replica killed outright left sandboxes and mounts: a start cleans them up.
    a.start();
  }
  fs::remove_all(dir);
  return 0;
}
