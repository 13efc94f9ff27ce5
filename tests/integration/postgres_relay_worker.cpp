// A relay process for the PostgreSQL fault tests (postgres_store_test.cpp): runs one outpost
// Relay on the store URL with a sink that fails at random and logs every delivered event, so a
// checker can prove no loss, per-key order and per-key exclusion across processes.
//
//   postgres_relay_worker STORE_URL LOG_PATH FAIL_PERMILLE SEED [ordered|unordered [LEASE_MS
//                         [BATCH_DELAY_MS]]]
//
// Log lines (one write() per batch, before the relay acks):
// "D <pid> <seq> <key> <id> <t0> <t1> <crashes>", t0/t1 = CLOCK_MONOTONIC ns around the whole
// batch (system-wide, so comparable across processes), crashes = StoredEvent::crashes (claims
// after an expired lease). LEASE_MS: the relay's lease (default 2000); BATCH_DELAY_MS: extra
// time each deliver() call takes (default 0), so a backlog lasts. Runs until SIGTERM/SIGINT.
// While the database is down at start it keeps retrying.

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "outpost/relay.h"
#include "outpost/stores/postgres.h"

namespace {

std::int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class LoggingSink final : public outpost::Sink {
 public:
  LoggingSink(int fd, int fail_permille, unsigned seed, int delay_ms)
      : fd_(fd), fail_permille_(fail_permille), delay_ms_(delay_ms), rng_(seed) {}
  std::string_view name() const override { return "test-log"; }

  std::vector<outpost::DeliveryResult> deliver(
      std::span<const outpost::StoredEvent> events) override {
    std::int64_t t0 = mono_ns();
    std::vector<outpost::DeliveryResult> out;
    std::map<std::string, bool> failed;
    std::vector<const outpost::StoredEvent*> ok;
    std::uniform_int_distribution<int> pct(0, 999);
    for (const auto& e : events) {
      if (!e.key.empty() && failed[e.key]) {
        out.push_back(outpost::DeliveryResult::skipped("earlier event of key failed"));
        continue;
      }
      if (pct(rng_) < fail_permille_) {
        if (!e.key.empty()) failed[e.key] = true;
        out.push_back(outpost::DeliveryResult::failed("random test failure"));
        continue;
      }
      ok.push_back(&e);
      out.push_back(outpost::DeliveryResult::delivered());
    }
    // Simulated work, so that overlapping deliveries of one key would be visible in the log.
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 800)(rng_)) +
        std::chrono::milliseconds(delay_ms_));
    std::int64_t t1 = mono_ns();
    std::string lines;
    std::string times = " " + std::to_string(t0) + " " + std::to_string(t1) + " ";
    for (const auto* e : ok)
      lines += "D " + std::to_string(::getpid()) + " " + std::to_string(e->seq) + " " +
               (e->key.empty() ? "-" : e->key) + " " + e->id.str() + times +
               std::to_string(e->crashes) + "\n";
    if (!lines.empty() &&
        ::write(fd_, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size()))
      throw std::runtime_error("log write failed");
    return out;
  }

 private:
  int fd_;
  int fail_permille_;
  int delay_ms_;
  std::mt19937 rng_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: %s STORE_URL LOG_PATH FAIL_PERMILLE SEED [ordered|unordered [LEASE_MS "
                 "[BATCH_DELAY_MS]]]\n",
                 argv[0]);
    return 2;
  }
  std::string url = argv[1];
  int fd = ::open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return 1;
  int fail = std::atoi(argv[3]);
  unsigned seed = static_cast<unsigned>(std::strtoul(argv[4], nullptr, 10));
  bool unordered = argc > 5 && std::string(argv[5]) == "unordered";
  const int lease_ms = argc > 6 ? std::atoi(argv[6]) : 2'000;
  const int delay_ms = argc > 7 ? std::atoi(argv[7]) : 0;

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::unique_ptr<outpost::Store> store;
  for (int attempt = 0; !store; ++attempt) {
    try {
      store = outpost::open_postgres_store(url);
    } catch (const outpost::Error& e) {
      if (!e.retryable()) {
        std::fprintf(stderr, "worker: %s\n", e.what());
        return 2;
      }
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::min(50 << std::min(attempt, 5), 1000)));
    }
  }
  LoggingSink sink(fd, fail, seed, delay_ms);
  outpost::RelayOptions options;
  options.batch_size = 100;
  options.lease = outpost::Duration(lease_ms);
  options.max_attempts = 1000;
  options.backoff_base = outpost::Duration(5);
  options.backoff_max = outpost::Duration(50);
  options.poll_interval = outpost::Duration(500);
  options.order = unordered ? outpost::ClaimOrder::unordered : outpost::ClaimOrder::ordered;
  outpost::Relay relay(*store, sink, options);
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&set, &sig);
    relay.stop();
  });
  relay.run();
  stopper.join();
  return 0;
}
