// outpost quick start (the README's): emit an event in the same SQLite transaction as a business
// write, and handle it in-process. Every return code is checked; a failure exits non-zero.
//
//   g++ -std=c++20 quickstart.cpp $(pkg-config --cflags --libs outpost-sqlite) -o quickstart
//   ./quickstart [PATH]          (default: ./quickstart.db)

#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <outpost/outpost.h>
#include <outpost/stores/sqlite.h>

// Runs one statement on the application's own connection, throwing on any error.
void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = std::string(sql) + ": " + (err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    throw std::runtime_error(message);
  }
}

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : "quickstart.db";

  // 1. The outbox lives in your database file (created on first use).
  outpost::Bus bus(outpost::open_store("sqlite:" + path));

  // 2. One handler per event type. Throwing fails the delivery: retried with backoff, then
  //    dead-lettered.
  bus.on("user.created", [](const outpost::StoredEvent& e) {
    std::printf("handled %s key=%s payload=%s\n", e.type.c_str(), e.key.c_str(), e.payload.c_str());
  });
  bus.start();  // the relay runs on its own thread

  // 3. Your own connection and transaction: the event exists iff the transaction commits.
  sqlite3* raw = nullptr;
  int rc = sqlite3_open(path.c_str(), &raw);
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db(raw, &sqlite3_close);
  if (rc != SQLITE_OK) throw std::runtime_error("cannot open " + path);
  outpost::configure_sqlite_connection(db.get());  // WAL + busy timeout, once per connection
  exec(db.get(), "CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, name TEXT)");

  exec(db.get(), "BEGIN IMMEDIATE");
  exec(db.get(), "INSERT INTO users (name) VALUES ('ada')");
  bus.emit(outpost::Event::make("user.created", R"({"name":"ada"})", /*key=*/"user-ada"),
           outpost::TxHandle::sqlite(db.get()));
  exec(db.get(), "COMMIT");

  // A rolled-back transaction emits nothing.
  exec(db.get(), "BEGIN IMMEDIATE");
  exec(db.get(), "INSERT INTO users (name) VALUES ('bob')");
  bus.emit(outpost::Event::make("user.created", R"({"name":"bob"})", "user-bob"),
           outpost::TxHandle::sqlite(db.get()));
  exec(db.get(), "ROLLBACK");

  // 4. For tests and demos: wait until it was handled, then stop (finishes the batch in flight).
  auto handled = bus.wait_for("user.created", std::chrono::seconds(10));
  bus.stop();
  auto stats = bus.store().stats();
  std::printf("pending=%lld dead=%lld\n", static_cast<long long>(stats.pending),
              static_cast<long long>(stats.dead));
  if (!handled || handled->key != "user-ada" || stats.pending != 0) {
    std::fprintf(stderr, "quickstart: the event was not handled\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "quickstart: %s\n", e.what());
  return 1;
}
