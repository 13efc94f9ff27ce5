// Throughput of the SQLite store alone versus plain SQL on the same machine, in the same run:
//   store: append (emit_many batches) then claim(batch) + ack until empty, and again with
//   settle_and_claim (ack of one batch + claim of the next in one call, as the relay does)
//   raw:   INSERT `batch` rows per transaction (prepared, INTEGER key), then one
//          DELETE ... WHERE seq IN (SELECT ... ORDER BY seq LIMIT batch) RETURNING * per batch
// Usage: outpost_sqlite_store_bench [events=200000] [batch=100] [dir=/tmp] [full]
// Not a test (no pass/fail): the figures go into docs/benchmarks.md.

#include <sqlite3.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "outpost/stores/sqlite.h"

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

namespace {

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

void remove_db(const std::string& path) {
  for (const char* s : {"", "-wal", "-shm"}) std::filesystem::remove(path + s);
}

void check(int rc, sqlite3* db, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    std::fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
    std::exit(1);
  }
}

struct Figures {
  double insert_per_s, drain_per_s;
};

Figures raw(const std::string& path, std::size_t events, std::size_t batch, bool full,
            const std::string& payload) {
  remove_db(path);
  sqlite3* db = nullptr;
  check(sqlite3_open(path.c_str(), &db), db, "open");
  check(sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr), db, "wal");
  check(sqlite3_exec(db, full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", nullptr,
                     nullptr, nullptr),
        db, "sync");
  check(sqlite3_exec(db,
                     "CREATE TABLE raw (seq INTEGER PRIMARY KEY, id BLOB, type TEXT, key TEXT, "
                     "payload BLOB, occurred_at INTEGER, due_at INTEGER)",
                     nullptr, nullptr, nullptr),
        db, "create");
  sqlite3_stmt* ins = nullptr;
  check(sqlite3_prepare_v2(db,
                           "INSERT INTO raw (id, type, key, payload, occurred_at, due_at) "
                           "VALUES (?, 'bench', ?, ?, ?, 0)",
                           -1, &ins, nullptr),
        db, "prepare insert");
  unsigned char id[16] = {};
  auto t = SteadyClock::now();
  for (std::size_t done = 0; done < events;) {
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    for (std::size_t i = 0; i < batch && done < events; ++i, ++done) {
      std::memcpy(id, &done, sizeof done);
      std::string key = "k" + std::to_string(done % 64);
      sqlite3_bind_blob(ins, 1, id, 16, SQLITE_STATIC);
      sqlite3_bind_text(ins, 2, key.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_blob(ins, 3, payload.data(), static_cast<int>(payload.size()), SQLITE_STATIC);
      sqlite3_bind_int64(ins, 4, static_cast<sqlite3_int64>(done));
      check(sqlite3_step(ins), db, "insert");
      sqlite3_reset(ins);
    }
    check(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), db, "commit");
  }
  double insert_s = seconds_since(t);
  sqlite3_stmt* del = nullptr;
  check(sqlite3_prepare_v2(db,
                           "DELETE FROM raw WHERE seq IN (SELECT seq FROM raw ORDER BY seq "
                           "LIMIT ?) RETURNING seq, id, type, key, payload, occurred_at",
                           -1, &del, nullptr),
        db, "prepare delete");
  t = SteadyClock::now();
  std::size_t drained = 0;
  while (true) {
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    sqlite3_bind_int64(del, 1, static_cast<sqlite3_int64>(batch));
    std::size_t n = 0;
    int rc;
    while ((rc = sqlite3_step(del)) == SQLITE_ROW) ++n;
    check(rc, db, "delete");
    sqlite3_reset(del);
    check(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), db, "commit");
    drained += n;
    if (n == 0) break;
  }
  double drain_s = seconds_since(t);
  sqlite3_finalize(ins);
  sqlite3_finalize(del);
  sqlite3_close(db);
  remove_db(path);
  return {events / insert_s, drained / drain_s};
}

// Drains with claim + ack (two write transactions per batch), or with settle_and_claim (the
// relay's path: the ack of one batch and the claim of the next in one transaction).
Figures store(const std::string& path, std::size_t events, std::size_t batch, bool full,
              const std::string& payload, bool settle_and_claim) {
  remove_db(path);
  outpost::SqliteOptions o;
  o.path = path;
  o.synchronous_full = full;
  auto s = outpost::make_sqlite_store(o);
  std::vector<outpost::Event> chunk;
  auto t = SteadyClock::now();
  for (std::size_t done = 0; done < events;) {
    chunk.clear();
    for (std::size_t i = 0; i < batch && done < events; ++i, ++done)
      chunk.push_back(outpost::Event::make("bench", payload, "k" + std::to_string(done % 64)));
    s->append(chunk);
  }
  double insert_s = seconds_since(t);
  t = SteadyClock::now();
  std::size_t drained = 0;
  std::vector<outpost::EventId> ids;
  double claim_s = 0;
  const auto order = std::getenv("OUTPOST_BENCH_UNORDERED") ? outpost::ClaimOrder::unordered
                                                            : outpost::ClaimOrder::ordered;
  if (settle_and_claim) {
    for (auto b = s->claim(batch, 30s, order); !b.empty();) {
      ids.clear();
      for (auto& e : b.events) ids.push_back(e.id);
      outpost::Settlement settlement;
      settlement.acks = ids;
      outpost::SettleCounts counts;
      b = s->settle_and_claim(b, settlement, counts, batch, 30s, order);
      drained += counts.acked;
    }
  }
  while (!settle_and_claim) {
    auto tc = SteadyClock::now();
    auto b = s->claim(batch, 30s, order);
    claim_s += seconds_since(tc);
    if (b.empty()) break;
    ids.clear();
    for (auto& e : b.events) ids.push_back(e.id);
    drained += s->ack(b, ids);
  }
  if (std::getenv("OUTPOST_BENCH_VERBOSE"))
    std::fprintf(stderr, "claim %.2f s of %.2f s\n", claim_s, seconds_since(t));
  double drain_s = seconds_since(t);
  s.reset();
  remove_db(path);
  if (drained != events) std::fprintf(stderr, "drained %zu of %zu!\n", drained, events);
  return {events / insert_s, drained / drain_s};
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t events = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 200000;
  std::size_t batch = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 100;
  std::string dir = argc > 3 ? argv[3] : "/tmp";
  bool full = argc > 4 && std::string(argv[4]) == "full";
  std::string payload =
      "{\"order\":12345,\"customer\":\"c-000042\",\"items\":[" + std::string(150, '1') + "]}";
  std::string path = dir + "/outpost_sqlite_bench_" + std::to_string(::getpid()) + ".db";
  Figures r = raw(path, events, batch, full, payload);
  Figures s = store(path, events, batch, full, payload, false);
  Figures sc = store(path, events, batch, full, payload, true);
  std::printf("events=%zu batch=%zu synchronous=%s payload=%zuB\n", events, batch,
              full ? "FULL" : "NORMAL", payload.size());
  std::printf("%-28s %12s %12s\n", "", "insert/s", "drain/s");
  std::printf("%-28s %12.0f %12.0f\n", "raw SQL", r.insert_per_s, r.drain_per_s);
  std::printf("%-28s %12.0f %12.0f\n", "store (append, claim+ack)", s.insert_per_s, s.drain_per_s);
  std::printf("%-28s %11.0f%% %11.0f%%\n", "store / raw", 100 * s.insert_per_s / r.insert_per_s,
              100 * s.drain_per_s / r.drain_per_s);
  std::printf("%-28s %12.0f %12.0f\n", "store (settle_and_claim)", sc.insert_per_s, sc.drain_per_s);
  std::printf("%-28s %11.0f%% %11.0f%%\n", "store / raw", 100 * sc.insert_per_s / r.insert_per_s,
              100 * sc.drain_per_s / r.drain_per_s);
  return 0;
}
