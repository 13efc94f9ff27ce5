// A consumer process for the kill and rebalance tests (consume_kill_test.cpp): runs a Consumer
// over a log whose handler records each message's effect as a row (event id, key, n from the
// payload {"n":N}, this process's pid) in the table `effects` of the checkpoint store (SQLite),
// on the batch's transaction. So an effect that happened twice is two rows, and the row order
// is the order effects committed.
//   usage: outpost_consume_worker FROM sqlite:PATH GROUP BATCH [FAIL_COMMITS]
// Runs until SIGTERM/SIGINT (then finishes the batch in flight and exits 0). FAIL_COMMITS, e.g.
// "3,4,10": those commits (counted from 1 in this process) fail with a ConnectionError before
// they happen, as a store outage would (the consumer survives it and backs off).

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "outpost/consumer.h"
#include "outpost/error.h"

namespace {

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(why);
  }
}

// {"n":123} -> 123
long long n_of(const std::string& payload) {
  auto at = payload.find("\"n\":");
  return at == std::string::npos ? -1 : std::stoll(payload.substr(at + 4));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s FROM sqlite:PATH GROUP BATCH [FAIL_COMMITS]\n", argv[0]);
    return 2;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before any thread starts
  std::fprintf(stderr, "worker: signals blocked\n");   // tests signal only after this line
  try {
    auto store = outpost::open_checkpoint_store(argv[2]);
    auto source = outpost::open_source(argv[1]);
    outpost::ConsumerOptions o;
    o.group = argv[3];
    o.batch_size = std::stoul(argv[4]);
    o.poll = std::chrono::milliseconds(200);
    o.on_error = [](const std::string& e) { std::fprintf(stderr, "worker: %s\n", e.c_str()); };
    std::set<int> fail_commits;
    if (argc == 6)
      for (std::size_t at = 0; at < std::strlen(argv[5]);) {
        fail_commits.insert(std::atoi(argv[5] + at));
        const char* comma = std::strchr(argv[5] + at, ',');
        at = comma ? static_cast<std::size_t>(comma - argv[5]) + 1 : std::strlen(argv[5]);
      }
    int commits = 0;
    o.before_commit = [&] {
      if (fail_commits.count(++commits))
        throw outpost::ConnectionError(
            "worker", "injected store outage before commit " + std::to_string(commits));
    };
    outpost::Consumer consumer(*source, *store, o);
    std::thread stopper([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      consumer.stop();
    });
    stopper.detach();
    const long long pid = ::getpid();
    consumer.run([&](outpost::ConsumerBatch& batch) {
      auto* db = static_cast<sqlite3*>(batch.tx().native());
      exec(db,
           "CREATE TABLE IF NOT EXISTS effects (event_id TEXT NOT NULL, key TEXT NOT NULL, "
           "n INTEGER NOT NULL, pid INTEGER NOT NULL)");
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, "INSERT INTO effects VALUES (?1, ?2, ?3, ?4)", -1, &st, nullptr) !=
          SQLITE_OK)
        throw std::runtime_error(sqlite3_errmsg(db));
      for (const auto& m : batch.messages()) {
        std::string id = m.event.id.str();
        sqlite3_bind_text(st, 1, id.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, m.event.key.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, n_of(m.event.payload));
        sqlite3_bind_int64(st, 4, pid);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
          sqlite3_finalize(st);
          throw std::runtime_error(sqlite3_errmsg(db));
        }
      }
      sqlite3_finalize(st);
    });
    return 0;
  } catch (const outpost::ConfigError& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 1;
  }
}
