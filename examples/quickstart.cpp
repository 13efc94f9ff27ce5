// outpost quick start: emit an event in the same SQLite transaction as your business write, and
// handle it in-process. Build: part of the outpost build (target outpost_quickstart).
//   ./outpost_quickstart [PATH]      (default: ./quickstart.db)

#include <sqlite3.h>

#include <cstdio>
#include <memory>
#include <string>

#include "outpost/outpost.h"
#include "outpost/stores/sqlite.h"

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "quickstart.db";

  // 1. The outbox lives in your database file.
  auto bus = std::make_unique<outpost::Bus>(outpost::open_store("sqlite:" + path));

  // 2. One handler per event type. Throwing fails the delivery: it is retried with backoff.
  bus->on("user.created", [](const outpost::StoredEvent& e) {
    std::printf("handled %s key=%s payload=%s (attempt %d)\n", e.type.c_str(), e.key.c_str(),
                e.payload.c_str(), e.attempts);
  });
  bus->start();

  // 3. Your own connection and transaction: the event exists iff the transaction commits.
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return 1;
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> guard(db, &sqlite3_close);
  outpost::configure_sqlite_connection(db);
  sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, name TEXT)", nullptr,
               nullptr, nullptr);

  sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  sqlite3_exec(db, "INSERT INTO users (name) VALUES ('ada')", nullptr, nullptr, nullptr);
  bus->emit(outpost::Event::make("user.created", R"({"name":"ada"})", "user-ada"),
            outpost::TxHandle::sqlite(db));
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);

  // A rolled-back transaction emits nothing.
  sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  sqlite3_exec(db, "INSERT INTO users (name) VALUES ('bob')", nullptr, nullptr, nullptr);
  bus->emit(outpost::Event::make("user.created", R"({"name":"bob"})", "user-bob"),
            outpost::TxHandle::sqlite(db));
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);

  // 4. For tests and demos: wait until it was handled, then stop (drains in-flight work).
  auto handled = bus->wait_for("user.created", std::chrono::seconds(10));
  bus->stop();
  auto stats = bus->store().stats();
  std::printf("pending=%lld dead=%lld\n", static_cast<long long>(stats.pending),
              static_cast<long long>(stats.dead));
  if (!handled || handled->key != "user-ada" || stats.pending != 0) {
    std::fprintf(stderr, "quickstart: unexpected result\n");
    return 1;
  }
  return 0;
}
