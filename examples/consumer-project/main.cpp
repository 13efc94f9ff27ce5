// Emits an order event in the same SQLite transaction as the order row and handles it with the
// in-process bus; exits 0 once it was handled. Built against an installed outpost (see
// CMakeLists.txt next to this file).

#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <outpost/outpost.h>
#include <outpost/stores/sqlite.h>

namespace {

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = std::string(sql) + ": " + (err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    throw std::runtime_error(message);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : "consumer.db";
  outpost::Bus bus(outpost::open_store("sqlite:" + path));
  bus.on("order.placed", [](const outpost::StoredEvent& e) {
    std::printf("order.placed %s handled\n", e.key.c_str());
  });
  bus.start();

  sqlite3* raw = nullptr;
  int rc = sqlite3_open(path.c_str(), &raw);
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db(raw, &sqlite3_close);
  if (rc != SQLITE_OK) throw std::runtime_error("cannot open " + path);
  outpost::configure_sqlite_connection(db.get());
  exec(db.get(), "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER)");
  exec(db.get(), "BEGIN IMMEDIATE");
  exec(db.get(), "INSERT INTO orders VALUES ('order-1', 42)");
  bus.emit(outpost::Event::make("order.placed", R"({"total":42})", "order-1"),
           outpost::TxHandle::sqlite(db.get()));
  exec(db.get(), "COMMIT");

  auto handled = bus.wait_for("order.placed", std::chrono::seconds(10));
  bus.stop();
  if (!handled || handled->key != "order-1") {
    std::fprintf(stderr, "consumer: the event was not handled\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
