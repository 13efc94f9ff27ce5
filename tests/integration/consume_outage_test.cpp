// `outpost consume` through outages, black box (issue 17 item 1, consumer side): a destination
// that is down pauses the consumer (no attempt counted, nothing parked) and it resumes when the
// destination answers; a checkpoint store whose disk is full is retried, never fatal; one that
// hangs holds no SIGTERM past its I/O deadline (docs/consumers.md, "Failure classes").

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "cli_process.h"
#include "outpost/json.h"
#include "private_postgres.h"
#include "wait_until.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::vector<std::string> append_log(const std::string& path, int from, int n, int keys = 20) {
  std::ofstream out(path, std::ios::app);
  std::vector<std::string> ids;
  for (int i = from; i < from + n; ++i) {
    StoredEvent e;
    static_cast<Event&>(e) =
        Event::make("ride", "{\"n\":" + std::to_string(i) + "}", "k" + std::to_string(i % keys));
    ids.push_back(e.id.str());
    out << to_json(e) << "\n";
  }
  return ids;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A port nothing listens on (yet).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A webhook on `port` that answers 503 with Retry-After: 1 until `ok` is set, then 204, and
// records the Idempotency-Key (the event id) of each event it accepted.
class Webhook {
 public:
  explicit Webhook(int port) {
    server_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      if (!ok) {
        res.status = 503;
        res.set_header("Retry-After", "1");
        return;
      }
      std::lock_guard lock(mu_);
      accepted_.push_back(req.get_header_value("Idempotency-Key"));
      res.status = 204;
    });
    if (!server_.bind_to_port("127.0.0.1", port)) throw std::runtime_error("cannot bind");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~Webhook() {
    server_.stop();
    thread_.join();
  }
  std::vector<std::string> accepted() {
    std::lock_guard lock(mu_);
    return accepted_;
  }
  std::atomic<bool> ok{false};

 private:
  httplib::Server server_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> accepted_;
};

// The outage with DEFAULT flags, shortened: the webhook refuses connections for 5 s,
// answers 503 Retry-After: 1 for 3 s, then 204. Before: every failure was an attempt, 5
// attempts from 100 ms were spent in about a second, and the messages were parked.
TEST(ConsumeOutage, ADestinationThatIsDownPausesTheConsumerAndParksNothing) {
  TempDir dir;
  const std::string log = dir / "log.jsonl", cp = "sqlite:" + (dir / "cp.db");
  auto ids = append_log(log, 0, 200);
  const int port = free_port();
  CliProcess consume({"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", cp,
                      "--sink", "http://127.0.0.1:" + std::to_string(port) + "/hook"},
                     dir / "consume.log");
  std::this_thread::sleep_for(5s);  // connection refused
  std::optional<Webhook> hook;
  hook.emplace(port);  // 503 Retry-After: 1
  std::this_thread::sleep_for(3s);
  hook->ok = true;  // 204
  ASSERT_TRUE(wait_until(
      [&] {
        auto got = hook->accepted();
        return std::set<std::string>(got.begin(), got.end()).size() == ids.size();
      },
      90s))
      << hook->accepted().size() << " of " << ids.size() << " accepted\n"
      << read_file(dir / "consume.log");
  consume.signal(SIGTERM);
  ASSERT_EQ(consume.wait(30s), 0) << read_file(dir / "consume.log");
  const std::string text = read_file(dir / "consume.log");
  EXPECT_NE(text.find("parked 0"), std::string::npos) << text;
  EXPECT_NE(text.find("failed attempts 0"), std::string::npos) << text;
  EXPECT_EQ(count_of(text, "destination down since"), 1u) << text;
  EXPECT_EQ(count_of(text, "destination back after"), 1u) << text;
  auto r = run_cli({"consumers", "--checkpoint", cp, "dead", "--group", "g"});
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_TRUE(r.out.empty()) << r.out;
  // Per key, the first deliveries in log order.
  auto got = hook->accepted();
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
  std::map<int, std::size_t> last_of_key;
  std::set<std::string> seen;
  for (const auto& id : got) {
    if (!seen.insert(id).second) continue;
    int key = static_cast<int>(index[id] % 20);
    if (last_of_key.count(key)) {
      EXPECT_GT(index[id], last_of_key[key]) << "key " << key;
    }
    last_of_key[key] = index[id];
  }
}

// A tmpfs mounted on a directory for the test's life (root only; skipped without).
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

// Writes `path` until the file system is full.
void fill(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::string chunk(4096, 'x');
  while (::write(fd, chunk.data(), chunk.size()) > 0) {
  }
  ::close(fd);
}

// The checkpoint store's disk fills up while the consumer runs. Before: SQLITE_FULL was a
// backend error, fatal for the consumer (exit 1), while the relay's store retried it. Now it is
// retried with backoff, the batch in flight is not sent again and again while the store refuses
// writes, and the consumer finishes once there is space.
TEST(ConsumeOutage, ACheckpointStoreOnAFullDiskIsRetriedUntilThereIsSpace) {
  TempDir dir;
  Tmpfs disk(dir / "cp", "2m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (needs root)";
  const std::string log = dir / "log.jsonl", out = dir / "out.jsonl";
  const std::string cp = "sqlite:" + (dir / "cp/cp.db");
  auto ids = append_log(log, 0, 40);
  CliProcess consume({"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", cp,
                      "--sink", "file:" + out, "--batch", "40"},
                     dir / "consume.log");
  auto delivered = [&] { return fs::exists(out) ? event_ids_in(read_file(out)) : decltype(ids){}; };
  ASSERT_TRUE(wait_until([&] { return delivered().size() == 40; }, 60s))
      << read_file(dir / "consume.log");

  fill(dir / "cp/filler");
  auto more = append_log(log, 40, 400);
  ids.insert(ids.end(), more.begin(), more.end());
  ASSERT_TRUE(wait_until(
      [&] { return read_file(dir / "consume.log").find("full") != std::string::npos; }, 60s))
      << read_file(dir / "consume.log");
  // Still running, still failing: the store is retried, not given up.
  EXPECT_EQ(consume.wait(3s), -1) << read_file(dir / "consume.log");

  fs::remove(dir / "cp/filler");
  ASSERT_TRUE(wait_until(
      [&] {
        auto got = delivered();
        return std::set<std::string>(got.begin(), got.end()).size() == ids.size();
      },
      60s))
      << read_file(dir / "consume.log");
  consume.signal(SIGTERM);
  ASSERT_EQ(consume.wait(30s), 0) << read_file(dir / "consume.log");
  const std::string text = read_file(dir / "consume.log");
  EXPECT_NE(text.find("parked 0"), std::string::npos) << text;
  EXPECT_EQ(count_of(text, "work again after"), 1u) << "the recovery is said once: " << text;
  // The batch the sink confirmed when its commit failed is not sent again, however often the
  // commit is retried (before: once per retry, 7 times in 5 s).
  EXPECT_EQ(delivered().size(), ids.size()) << text;
}

// `outpost consume` whose PostgreSQL checkpoint store hangs (the server stopped with SIGSTOP, its
// TCP connections up) stops on the first SIGTERM: every statement on the store's own connection
// waits at most its I/O deadline (timeout_ms, 10 s by default), as the relay's store does
// (HungStore.PostgresSigtermStopsWithinTheStoreTimeout). Before, the first SIGTERM was held until
// the server was resumed. The bound is generous: the exit must come, its time is not measured.
TEST(ConsumeOutage, AHungCheckpointStoreLetsTheFirstSigtermStopTheConsumer) {
  PrivateCluster pg;
  TempDir dir;
  const std::string log = dir / "log.jsonl", out = dir / "out.jsonl";
  auto ids = append_log(log, 0, 40);
  CliProcess consume({"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", pg.url(),
                      "--sink", "file:" + out},
                     dir / "consume.log");
  ASSERT_TRUE(wait_until(
      [&] { return fs::exists(out) && event_ids_in(read_file(out)).size() >= ids.size(); }, 60s))
      << read_file(dir / "consume.log");
  pg.pause();
  // The idle consumer asks the store for operator retries before every read, so it meets the
  // stopped server at once; more messages make sure a batch is in flight too.
  append_log(log, 40, 40);
  std::this_thread::sleep_for(1s);
  consume.signal(SIGTERM);
  int code = consume.wait(60s);
  pg.resume();
  const std::string text = read_file(dir / "consume.log");
  ASSERT_NE(code, -1) << "outpost consume on a hung checkpoint store did not stop within 60 s of "
                         "one SIGTERM\n"
                      << text;
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("no reply within 10000 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("after signal"), std::string::npos) << text;
}

}  // namespace
}  // namespace outpost::testing
