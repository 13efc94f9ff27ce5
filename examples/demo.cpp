// The demo run by scripts/demo: an order service on the embedded SQLite store.
//  - places orders in transactions, some of which roll back (their events never exist);
//  - a flaky handler fails some deliveries, which are retried with exponential backoff;
//  - one poisoned order fails every attempt and ends in the dead letters;
//  - prints what happened and a summary.
//   ./outpost_demo PATH

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "outpost/outpost.h"
#include "outpost/stores/sqlite.h"

namespace {

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(std::string(sql) + ": " + msg);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "demo.db";
  using namespace std::chrono_literals;

  outpost::BusOptions options;
  options.relay.max_attempts = 4;
  options.relay.backoff_base = outpost::Duration(50);
  options.relay.backoff_max = outpost::Duration(400);
  std::mutex print_mu;
  options.on_error = [&](const std::string& message, const outpost::StoredEvent* e) {
    std::lock_guard lock(print_mu);
    std::printf("  ! %s%s\n", e ? ("[" + e->key + "] ").c_str() : "", message.c_str());
  };
  outpost::Bus bus(outpost::open_store("sqlite:" + path), options);

  std::atomic<int> handled{0};
  std::map<std::string, int> attempts_seen;
  bus.on("order.placed", [&](const outpost::StoredEvent& e) {
    std::lock_guard lock(print_mu);
    attempts_seen[e.key] = e.attempts;
    if (e.key == "order-13") throw std::runtime_error("payment provider rejects order-13");
    // Flaky: every third order fails its first two attempts.
    int n = std::stoi(e.key.substr(6));
    if (n % 3 == 0 && e.attempts < 3)
      throw std::runtime_error("warehouse API timed out (attempt " + std::to_string(e.attempts) +
                               ")");
    std::printf("  handled %s %s (attempt %d)\n", e.key.c_str(), e.payload.c_str(), e.attempts);
    ++handled;
  });
  bus.start();

  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return 1;
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> guard(db, &sqlite3_close);
  outpost::configure_sqlite_connection(db);
  exec(db, "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total REAL)");

  int committed = 0, rolled_back = 0;
  std::printf("placing 15 orders (every 5th transaction rolls back)\n");
  for (int i = 1; i <= 15; ++i) {
    exec(db, "BEGIN IMMEDIATE");
    std::string insert = "INSERT INTO orders (id, total) VALUES (" + std::to_string(i) + ", " +
                         std::to_string(i * 10) + ".5)";
    exec(db, insert.c_str());
    std::string key = "order-" + std::to_string(i);
    bus.emit(outpost::Event::make("order.placed",
                                  R"({"order":)" + std::to_string(i) + R"(,"total":)" +
                                      std::to_string(i * 10) + ".5}",
                                  key),
             outpost::TxHandle::sqlite(db));
    if (i % 5 == 0) {
      exec(db, "ROLLBACK");
      ++rolled_back;
      std::printf("  rolled back %s: no order row, no event\n", key.c_str());
    } else {
      exec(db, "COMMIT");
      ++committed;
    }
  }

  // Wait for the outbox to settle: everything handled or dead.
  auto deadline = std::chrono::steady_clock::now() + 30s;
  outpost::StoreStats stats;
  for (;;) {
    stats = bus.store().stats();
    if ((stats.pending == 0 && stats.leased == 0) || std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(50ms);
  }
  bus.stop();

  auto dead = bus.store().dead(10);
  auto c = bus.counters();
  std::printf("\nsummary\n");
  std::printf("  orders committed       %d (events emitted in the same transactions)\n", committed);
  std::printf("  orders rolled back     %d (no events)\n", rolled_back);
  std::printf("  delivered              %llu\n", static_cast<unsigned long long>(c.delivered));
  std::printf("  failed attempts        %llu (retried with backoff)\n",
              static_cast<unsigned long long>(c.failed));
  std::printf("  dead letters           %zu\n", dead.size());
  for (const auto& d : dead)
    std::printf("    %s %s after %d attempts: %s\n", d.id.str().c_str(), d.key.c_str(), d.attempts,
                d.last_error.c_str());
  std::printf("  pending                %lld\n", static_cast<long long>(stats.pending));
  bool ok = handled.load() == committed - 1 && dead.size() == 1 && stats.pending == 0;
  std::printf("%s\n", ok ? "demo OK" : "demo: unexpected result");
  return ok ? 0 : 1;
}
