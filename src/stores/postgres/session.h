#pragma once
// The settlement session: the one connection per store object on which the relay's statements
// run (claim, ack, nack, release, renew, and settle_and_claim's pipeline), with its own mutex.
// Each call is its own transaction, so a call that returns has committed: a count it returns
// can never be rolled back by a later failure. A call that throws drops the connection (the
// next call reconnects); whatever it sent may or may not have committed.

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "stores/postgres/pg_conn.h"

namespace outpost::pg {

// One prepared statement: its name (one plan per name and connection), text and parameters.
struct Stmt {
  std::string name;
  std::string sql;
  Params params;
  const char* what = "";  // names the operation in errors
};

class Session {
 public:
  explicit Session(const Endpoint& ep) : ep_(ep) {}

  // Runs one statement (an implicit transaction); throws on failure.
  ResultPtr run(Stmt& stmt);

  // Sends `steps` as one libpq pipeline with one Sync at the end: one round trip and one
  // implicit transaction (all or nothing). Returns each step's result in order; throws the
  // first failure's error after draining the pipeline.
  std::vector<ResultPtr> run_pipeline(std::span<Stmt* const> steps);

 private:
  Conn& connection();  // caller holds mu_
  std::vector<ResultPtr> pipeline(Conn& c, std::span<Stmt* const> steps);

  const Endpoint& ep_;
  std::mutex mu_;
  std::unique_ptr<Conn> conn_;  // guarded by mu_
};

}  // namespace outpost::pg
