// The raw SQLite baseline for `outpost bench --store sqlite:...`: the same rows the outbox
// handles (integer sequence key, 16-byte id, type, key, payload, timestamps), inserted by one
// producer thread in `batch`-row transactions while one consumer thread selects and deletes them
// in `batch`-row transactions (DELETE ... RETURNING), each on its own connection, WAL, the same
// `synchronous` setting as the store URL (default NORMAL). Writers are serialised by a FIFO lock,
// as LIMITS.md found SQLite's busy handler unfair. No outpost code runs here.

#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "baseline.h"
#include "core/fair_lock.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::bench {
namespace {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

void check(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
    throw Error(ErrorCode::backend, "sqlite",
                std::string("baseline: ") + what + ": " + sqlite3_errmsg(db));
}

void exec(sqlite3* db, const std::string& sql) {
  check(db, sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), sql.c_str());
}

Db open_db(const std::string& path, const std::string& synchronous) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  Db db(raw);
  check(db.get(), rc, "open");
  sqlite3_busy_timeout(db.get(), 5000);
  exec(db.get(), "PRAGMA journal_mode=WAL");
  exec(db.get(), "PRAGMA synchronous=" + synchronous);
  return db;
}

Stmt prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  check(db, sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr), sql);
  return Stmt(s);
}

}  // namespace

BaselineResult sqlite_baseline(const BaselineRequest& request) {
  auto url = core::Url::parse(request.url);
  std::string synchronous = "NORMAL";
  if (auto s = url.param("synchronous")) synchronous = *s;
  if (synchronous != "NORMAL" && synchronous != "FULL" && synchronous != "normal" &&
      synchronous != "full" && synchronous != "OFF" && synchronous != "off")
    synchronous = "NORMAL";
  // A separate file next to the store's (memory-backed for sqlite::memory:), removed after.
  std::string path = url.path();
  if (path.empty() || path == ":memory:")
    path = "/dev/shm/outpost-baseline-" + std::to_string(getpid()) + ".db";
  else
    path += ".baseline";
  auto remove_files = [&] {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  };
  remove_files();

  const std::size_t total = request.events;
  const std::size_t batch = request.batch ? request.batch : 100;
  std::string payload(request.payload_bytes, 'x');
  double seconds = 0;
  {
    Db setup = open_db(path, synchronous);
    exec(setup.get(),
         "CREATE TABLE IF NOT EXISTS baseline (seq INTEGER PRIMARY KEY, id BLOB NOT NULL, "
         "type TEXT NOT NULL, key TEXT NOT NULL, payload BLOB, occurred_at INTEGER, headers TEXT, "
         "attempts INTEGER NOT NULL DEFAULT 0, due_at INTEGER NOT NULL DEFAULT 0)");
    Db producer_db = open_db(path, synchronous);
    Db consumer_db = open_db(path, synchronous);
    Stmt insert = prepare(producer_db.get(),
                          "INSERT INTO baseline (id, type, key, payload, occurred_at, headers, "
                          "due_at) VALUES (?1, 'bench.event', ?2, ?3, ?4, '{}', ?4)");
    Stmt take =
        prepare(consumer_db.get(),
                "DELETE FROM baseline WHERE seq IN (SELECT seq FROM baseline ORDER BY "
                "seq LIMIT ?1) RETURNING seq, id, type, key, payload, occurred_at, headers");
    core::FairLock lock;
    std::atomic<bool> failed{false};
    std::string error;
    std::mutex error_mu;
    auto fail = [&](const std::exception& e) {
      std::lock_guard l(error_mu);
      if (error.empty()) error = e.what();
      failed = true;
    };

    auto t0 = std::chrono::steady_clock::now();
    std::thread producer([&] {
      try {
        sqlite3* db = producer_db.get();
        for (std::size_t done = 0; done < total && !failed;) {
          std::size_t n = std::min(batch, total - done);
          std::lock_guard l(lock);
          exec(db, "BEGIN IMMEDIATE");
          for (std::size_t i = 0; i < n; ++i) {
            auto id = EventId::generate();
            std::string key = "k" + std::to_string((done + i) % 1000);
            sqlite3_bind_blob(insert.get(), 1, id.bytes().data(), 16, SQLITE_STATIC);
            sqlite3_bind_text(insert.get(), 2, key.data(), int(key.size()), SQLITE_TRANSIENT);
            sqlite3_bind_blob(insert.get(), 3, payload.data(), int(payload.size()), SQLITE_STATIC);
            sqlite3_bind_int64(insert.get(), 4, now().time_since_epoch().count());
            check(db, sqlite3_step(insert.get()), "insert");
            sqlite3_reset(insert.get());
          }
          exec(db, "COMMIT");
          done += n;
        }
      } catch (const std::exception& e) {
        fail(e);
      }
    });
    std::size_t consumed = 0;
    try {
      sqlite3* db = consumer_db.get();
      std::size_t checksum = 0;
      while (consumed < total && !failed) {
        std::size_t got = 0;
        {
          std::lock_guard l(lock);
          exec(db, "BEGIN IMMEDIATE");
          sqlite3_bind_int64(take.get(), 1, std::int64_t(batch));
          int rc;
          while ((rc = sqlite3_step(take.get())) == SQLITE_ROW) {
            // Read the columns as a relay would, so the baseline does not skip the copy-out.
            checksum += std::size_t(sqlite3_column_bytes(take.get(), 4)) +
                        std::size_t(sqlite3_column_bytes(take.get(), 1));
            ++got;
          }
          check(db, rc, "delete returning");
          sqlite3_reset(take.get());
          exec(db, "COMMIT");
        }
        consumed += got;
        if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      (void)checksum;
    } catch (const std::exception& e) {
      fail(e);
    }
    producer.join();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failed) {
      remove_files();
      throw Error(ErrorCode::backend, "sqlite", error);
    }
  }
  remove_files();
  BaselineResult r;
  r.events_per_s = seconds > 0 ? double(total) / seconds : 0;
  r.what = "plain SQL, synchronous=" + synchronous + ": 1 producer INSERTs " +
           std::to_string(batch) + " rows/txn while 1 consumer DELETE..RETURNING " +
           std::to_string(batch) + " rows/txn";
  return r;
}

}  // namespace outpost::bench
