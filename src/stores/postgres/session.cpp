#include "stores/postgres/session.h"

namespace outpost::pg {

Conn& Session::connection() {
  if (!conn_ || broken(conn_->pg.get())) {
    conn_.reset();
    auto c = std::make_unique<Conn>();
    c->pg = connect(ep_);
    // Every statement on this connection touches at most a batch of rows through an index
    // (seq, key+seq). The planner does not always know: a plan made while the outbox was
    // small or freshly created (stale statistics, cached generic plan) seq-scans and sorts
    // the whole backlog for every claim (measured: 29 ms instead of 3 ms per claim on a
    // growing 15k-row backlog). Disabling those two plan shapes here keeps the index plans.
    // The partitions table (a few dozen rows) is still read by a sequential scan, now priced
    // as "disabled", which pushed every claim past jit_above_cost: 0.4-1 s of JIT compiling
    // per statement. These statements touch a batch of rows: JIT never pays off here.
    exec_simple(ep_, c->pg.get(), "SET enable_seqscan = off; SET enable_sort = off; SET jit = off",
                "session setup");
    conn_ = std::move(c);
  }
  return *conn_;
}

ResultPtr Session::run(Stmt& stmt) {
  std::lock_guard lock(mu_);
  try {
    return exec_prepared(ep_, connection(), stmt.name.c_str(), stmt.sql, stmt.params, stmt.what);
  } catch (...) {
    conn_.reset();  // closing rolls back on the server
    throw;
  }
}

std::vector<ResultPtr> Session::run_pipeline(std::span<Stmt* const> steps) {
  std::lock_guard lock(mu_);
  try {
    return pipeline(connection(), steps);
  } catch (...) {
    conn_.reset();  // a connection left in pipeline mode is not reused
    throw;
  }
}

std::vector<ResultPtr> Session::pipeline(Conn& c, std::span<Stmt* const> steps) {
  PGconn* conn = c.pg.get();
  for (Stmt* s : steps) prepare(ep_, c, s->name.c_str(), s->sql, s->what);
  const char* what = steps.front()->what;
  // One deadline for the whole round trip (connection setup and prepares have their own).
  const Deadline deadline = deadline_of(ep_);
  if (!PQenterPipelineMode(conn)) throw_error(ep_, conn, nullptr, what);
  for (Stmt* s : steps) {
    if (!PQsendQueryPrepared(conn, s->name.c_str(), s->params.size(), s->params.values(),
                             s->params.lengths(), s->params.formats(), 1))
      throw_error(ep_, conn, nullptr, s->what);
  }
  if (!PQpipelineSync(conn)) throw_error(ep_, conn, nullptr, what);
  std::vector<ResultPtr> out(steps.size());
  std::size_t failed = steps.size();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    out[i] = next_result(ep_, conn, deadline, steps[i]->what);
    if (!out[i] || broken(conn)) throw_error(ep_, conn, out[i].get(), steps[i]->what);
    auto st = PQresultStatus(out[i].get());
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK && failed == steps.size()) failed = i;
    // Each step's results end with a null result.
    while (ResultPtr extra = next_result(ep_, conn, deadline, steps[i]->what)) {
      if (broken(conn)) throw_error(ep_, conn, nullptr, steps[i]->what);
    }
  }
  ResultPtr sync = next_result(ep_, conn, deadline, what);
  if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC)
    throw_error(ep_, conn, sync.get(), std::string(what) + " (pipeline)");
  if (!PQexitPipelineMode(conn)) throw_error(ep_, conn, nullptr, what);
  if (failed < steps.size()) throw_error(ep_, conn, out[failed].get(), steps[failed]->what);
  return out;
}

}  // namespace outpost::pg
