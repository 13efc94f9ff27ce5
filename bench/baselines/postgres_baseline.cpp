// The raw PostgreSQL baseline for `outpost bench --store postgresql://...`: the rows the outbox
// handles (bigint identity, uuid, type, key, bytea payload, timestamps, jsonb headers) written by
// one producer connection as one prepared multi-row INSERT of `batch` rows per transaction, while
// one consumer connection drains them with
//   DELETE ... WHERE seq IN (SELECT seq ... ORDER BY seq LIMIT batch FOR UPDATE SKIP LOCKED)
//   RETURNING *
// per transaction. No outpost code runs here: it is what a hand-written outbox does at best,
// in a table of its own (dropped afterwards) in the store's database.

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "baseline.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::bench {
namespace {

struct ConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultCloser {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Conn = std::unique_ptr<PGconn, ConnCloser>;
using Result = std::unique_ptr<PGresult, ResultCloser>;

Conn connect_url(const core::Url& url) {
  std::string hosts, ports;
  for (const auto& hp : url.hosts()) {
    hosts += (hosts.empty() ? "" : ",") + hp.host;
    ports += (ports.empty() ? "" : ",") + std::to_string(hp.port ? hp.port : 5432);
  }
  std::vector<std::string> k, v;
  auto add = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    k.push_back(key);
    v.push_back(value);
  };
  add("host", hosts);
  add("port", ports);
  add("user", url.user());
  add("password", url.password());
  add("dbname", url.path());
  add("application_name", "outpost-baseline");
  std::vector<const char*> kp, vp;
  for (std::size_t i = 0; i < k.size(); ++i) {
    kp.push_back(k[i].c_str());
    vp.push_back(v[i].c_str());
  }
  kp.push_back(nullptr);
  vp.push_back(nullptr);
  Conn c(PQconnectdbParams(kp.data(), vp.data(), 0));
  if (PQstatus(c.get()) != CONNECTION_OK)
    throw ConnectionError("postgres", std::string("baseline: ") + PQerrorMessage(c.get()));
  return c;
}

Result check(PGconn* c, PGresult* r, const char* what) {
  Result res(r);
  auto st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    throw Error(ErrorCode::backend, "postgres",
                std::string("baseline: ") + what + ": " + PQerrorMessage(c));
  return res;
}

}  // namespace

BaselineResult postgres_baseline(const BaselineRequest& request) {
  auto url = core::Url::parse(request.url);
  for (const auto& [k, v] : url.query()) url.param(k);  // store parameters do not apply here
  const std::size_t total = request.events;
  const std::size_t batch = request.batch ? request.batch : 100;
  const std::string table = "outpost_baseline_" + std::to_string(::getpid());
  std::string payload(request.payload_bytes, 'x');

  Conn setup = connect_url(url);
  check(setup.get(), PQexec(setup.get(), ("DROP TABLE IF EXISTS " + table).c_str()), "drop");
  check(setup.get(),
        PQexec(setup.get(),
               ("CREATE TABLE " + table +
                " (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id uuid NOT NULL UNIQUE, "
                "type text NOT NULL, key text NOT NULL, payload bytea NOT NULL, occurred_at "
                "timestamptz NOT NULL, headers jsonb NOT NULL, attempts int NOT NULL DEFAULT 0, "
                "due_at timestamptz NOT NULL DEFAULT now())")
                   .c_str()),
        "create");

  Conn producer = connect_url(url);
  Conn consumer = connect_url(url);
  // Multi-row INSERT with 4 parameters per row (id, key, payload, occurred_at).
  std::string insert =
      "INSERT INTO " + table + " (id, type, key, payload, occurred_at, headers) VALUES ";
  for (std::size_t i = 0; i < batch; ++i) {
    std::size_t p = i * 4;
    insert += (i ? "," : "") + std::string("($") + std::to_string(p + 1) +
              "::uuid, 'bench.event', $" + std::to_string(p + 2) + ", $" + std::to_string(p + 3) +
              "::bytea, $" + std::to_string(p + 4) + "::timestamptz, '{}')";
  }
  check(producer.get(), PQprepare(producer.get(), "ins", insert.c_str(), 0, nullptr), "prepare");
  std::string drain = "DELETE FROM " + table + " WHERE seq IN (SELECT seq FROM " + table +
                      " ORDER BY seq LIMIT $1::int FOR UPDATE SKIP LOCKED) RETURNING *";
  check(consumer.get(), PQprepare(consumer.get(), "drain", drain.c_str(), 0, nullptr), "prepare");

  std::atomic<bool> failed{false};
  std::string error;
  auto t0 = std::chrono::steady_clock::now();
  std::thread produce([&] {
    try {
      std::vector<std::string> values(batch * 4);
      std::vector<const char*> ptrs(batch * 4);
      std::vector<int> lengths(batch * 4), formats(batch * 4, 0);
      std::string ts = format_rfc3339(now());
      for (std::size_t done = 0; done < total; done += batch) {
        for (std::size_t i = 0; i < batch; ++i) {
          values[i * 4] = EventId::generate().str();
          values[i * 4 + 1] = "k" + std::to_string((done + i) % 1000);
          values[i * 4 + 2] = payload;  // text input of bytea: plain ASCII 'x's are valid
          values[i * 4 + 3] = ts;
        }
        for (std::size_t i = 0; i < values.size(); ++i) {
          ptrs[i] = values[i].c_str();
          lengths[i] = static_cast<int>(values[i].size());
        }
        check(producer.get(),
              PQexecPrepared(producer.get(), "ins", static_cast<int>(values.size()), ptrs.data(),
                             lengths.data(), formats.data(), 1),
              "insert");
      }
    } catch (const std::exception& e) {
      error = e.what();
      failed = true;
    }
  });
  std::size_t consumed = 0;
  std::string lim = std::to_string(batch);
  const char* params[1] = {lim.c_str()};
  while (consumed < total && !failed) {
    auto r =
        check(consumer.get(),
              PQexecPrepared(consumer.get(), "drain", 1, params, nullptr, nullptr, 1), "drain");
    std::size_t n = static_cast<std::size_t>(PQntuples(r.get()));
    consumed += n;
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  produce.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  PQclear(PQexec(setup.get(), ("DROP TABLE IF EXISTS " + table).c_str()));
  if (failed) throw Error(ErrorCode::backend, "postgres", error);
  BaselineResult result;
  result.events_per_s = seconds > 0 ? static_cast<double>(consumed) / seconds : 0;
  result.what = "multi-row INSERT " + std::to_string(batch) +
                " rows/txn + DELETE .. SKIP LOCKED .. RETURNING " + std::to_string(batch) +
                " rows/txn, concurrently";
  return result;
}

}  // namespace outpost::bench
