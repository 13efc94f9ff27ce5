// Crash test (issue 2, item 10; guarantees 1, 2 and 4): 20,000 committed events are delivered to
// the file sink while the relay process (`outpost relay`) is killed with SIGKILL at random moments
// 20 times and restarted, with events emitted concurrently by `outpost emit -` in transactions,
// some rolled back (a batch with a bad last line is rejected whole). Then every committed id is
// in the sink, no rolled-back id is, and the duplicates are at most one batch per kill.
// OUTPOST_CRASH_SEED=N reproduces a run.
//
// Independent of machine speed: each kill comes at a random moment after the restarted relay has
// delivered something (or the emitter is done), and the final SIGTERM after the relay has blocked
// its stop signals (the first thing its main() does; before that, during fork, exec and dynamic
// loading, no program can take a signal).

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cli_process.h"
#include "outpost/event.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kCommitted = 20'000;
constexpr int kKills = 20;
constexpr int kBatch = 100;

// Every event id in the sink file, in file order. Scans for "id":"<uuid>" rather than parsing
// lines, because a relay killed in the middle of a write may leave a torn line that the next
// batch is appended to; the ids in a torn line were not acked, so they are delivered again.
std::vector<std::string> delivered_ids(const std::string& text) {
  std::vector<std::string> ids;
  const std::string marker = "\"id\":\"";
  for (auto pos = text.find(marker); pos != std::string::npos; pos = text.find(marker, pos)) {
    pos += marker.size();
    if (pos + 36 <= text.size() && text[pos + 36] == '"') ids.push_back(text.substr(pos, 36));
  }
  return ids;
}

std::uintmax_t size_of(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

// Waits until `condition` holds; false when `bound` passed first.
template <typename F>
bool wait_until(F&& condition, std::chrono::milliseconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Whether process `pid` blocks SIGINT and SIGTERM (the SigBlk mask in /proc/PID/status).
bool blocks_stop_signals(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("SigBlk:")) continue;
    auto mask = std::stoull(line.substr(7), nullptr, 16);
    auto bit = [](int sig) { return 1ull << (sig - 1); };
    return (mask & bit(SIGTERM)) && (mask & bit(SIGINT));
  }
  return false;
}

TEST(CrashTest, SigkilledRelayLosesNothingAndDuplicatesAtMostOneBatchPerKill) {
  std::uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("OUTPOST_CRASH_SEED")) seed = std::stoull(s);
  std::cout << "OUTPOST_CRASH_SEED=" << seed << std::endl;

  TempDir dir;
  const std::string store = "sqlite:" + dir / "outbox.db";
  const std::string sink_path = dir / "delivered.jsonl";
  // Create the schema before processes race to do it.
  ASSERT_EQ(run_cli({"events", "--store", store, "stats"}).code, 0);

  std::vector<std::string> committed, rolled_back;
  std::string emit_error;
  std::atomic<bool> emitting{true};
  std::thread emitter([&] {
    std::mt19937_64 rng(seed + 1);
    int n = 0;
    while (n < kCommitted && emit_error.empty()) {
      int size = std::min<int>(kCommitted - n, int(rng() % 200) + 1);
      bool rollback = rng() % 5 == 0;
      std::vector<std::string> ids;
      std::string input;
      for (int i = 0; i < size; ++i) {
        ids.push_back(EventId::generate().str());
        input += R"({"id":")" + ids.back() + R"(","type":"crash.test","key":"k)" +
                 std::to_string(rng() % 64) + R"(","payload":{"n":)" + std::to_string(n + i) +
                 "}}\n";
      }
      if (rollback)
        input += R"({"type":"crash.test"})"
                 "\n";  // no payload: the batch fails
      auto r = run_cli({"emit", "--store", store, "-"}, input, 60s);
      if (r.code != (rollback ? 2 : 0)) {
        emit_error = "emit exited " + std::to_string(r.code) +
                     " (rollback=" + std::to_string(rollback) + "): " + r.err;
        break;
      }
      auto& into = rollback ? rolled_back : committed;
      into.insert(into.end(), ids.begin(), ids.end());
      if (!rollback) n += size;
    }
    emitting = false;
  });

  std::mt19937_64 rng(seed);
  const std::vector<std::string> relay_args{"relay",
                                            "--store",
                                            store,
                                            "--sink",
                                            "file:" + sink_path,
                                            "--batch",
                                            std::to_string(kBatch),
                                            "--lease-ms",
                                            "1000",
                                            "--quiet"};
  auto log = dir / "relay.log";
  int kills = 0;
  {
    CliProcess relay(relay_args, log);
    for (; kills < kKills; ++kills) {
      // A kill at a random moment once this relay is at work (it delivered something since its
      // start), whatever the speed of the machine.
      const auto before = size_of(sink_path);
      ASSERT_TRUE(wait_until([&] { return size_of(sink_path) > before || !emitting; }, 120s))
          << "the restarted relay delivered nothing for 120 s: " << read_file(log);
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 200));
      relay.signal(SIGKILL);
      ASSERT_EQ(relay.wait(10s), 128 + SIGKILL) << read_file(log);
      relay.start();
    }
    emitter.join();
    ASSERT_TRUE(emit_error.empty()) << emit_error;
    // The relay just restarted: SIGTERM as soon as it can take it must drain it (exit 0).
    ASSERT_TRUE(wait_until([&] { return blocks_stop_signals(relay.pid()); }, 60s))
        << read_file(log);
    relay.signal(SIGTERM);
    ASSERT_EQ(relay.wait(60s), 0) << "relay did not drain on SIGTERM: " << read_file(log);
  }
  // Whatever the last relay left (expired leases of the killed ones included).
  auto final_run =
      run_cli({"relay", "--store", store, "--sink", "file:" + sink_path, "--batch",
               std::to_string(kBatch), "--lease-ms", "1000", "--until-empty", "--quiet"},
              {}, 60s);
  ASSERT_EQ(final_run.code, 0) << final_run.all();

  auto stats = run_cli({"events", "--store", store, "stats", "--json"});
  ASSERT_EQ(stats.code, 0);
  EXPECT_NE(stats.out.find("\"pending\":0"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("\"dead\":0"), std::string::npos) << stats.out;

  auto ids = delivered_ids(read_file(sink_path));
  std::unordered_map<std::string, int> seen;
  for (const auto& id : ids) ++seen[id];
  ASSERT_EQ(int(committed.size()), kCommitted);
  int missing = 0;
  for (const auto& id : committed)
    if (!seen.count(id)) ++missing;
  EXPECT_EQ(missing, 0) << "committed events lost";
  int leaked = 0;
  for (const auto& id : rolled_back)
    if (seen.count(id)) ++leaked;
  EXPECT_EQ(leaked, 0) << "rolled-back events delivered";
  std::unordered_set<std::string> committed_set(committed.begin(), committed.end());
  int unknown = 0;
  for (const auto& [id, count] : seen)
    if (!committed_set.count(id)) ++unknown;
  EXPECT_EQ(unknown, 0) << "ids in the sink that nobody committed";
  std::size_t duplicates = ids.size() - seen.size();
  std::cout << "kills " << kills << ", committed " << committed.size() << ", rolled back "
            << rolled_back.size() << ", delivered lines " << ids.size() << ", duplicates "
            << duplicates << std::endl;
  EXPECT_LE(duplicates, std::size_t(kills) * kBatch) << "more than one batch per kill";
}

}  // namespace
}  // namespace outpost::testing
