#pragma once
// Raw-engine baselines for `outpost bench` (docs/benchmarks.md): the same rows/messages handled by
// the engine with plain statements or a plain client loop, no outpost logic, measured in the
// same run so that the printed ratio holds on a noisy shared machine.
//
// Each backend owns one file bench/baselines/<backend>_baseline.cpp defining its function
// below; bench/CMakeLists.txt compiles it in (and defines OUTPOST_HAVE_<BACKEND>) only when
// that backend's target exists.

#include <cstddef>
#include <string>

namespace outpost::bench {

struct BaselineRequest {
  std::string url;          // the store URL (store baselines) or sink URL (sink baselines)
  std::size_t events = 0;   // rows/messages to move
  std::size_t batch = 100;  // rows per INSERT / per claim / per pipeline
  std::size_t payload_bytes = 200;
};

struct BaselineResult {
  double events_per_s = 0;
  std::string
      what;  // one line: what the baseline did, e.g. "INSERT 100 rows/txn + DELETE..RETURNING"
};

// Store baselines: insert the rows in `batch`-row transactions, then select+delete them in
// `batch`-row transactions (SQLite: plain SQL; PostgreSQL: multi-row INSERT then
// DELETE ... SKIP LOCKED ... RETURNING; Redis: pipelined HSET+ZADD then claim script + DEL).
BaselineResult sqlite_baseline(const BaselineRequest& request);
BaselineResult postgres_baseline(const BaselineRequest& request);
BaselineResult redis_baseline(const BaselineRequest& request);

// Sink baselines: the same messages produced by a plain client loop (broker's ceiling).
BaselineResult kafka_baseline(const BaselineRequest& request);
BaselineResult redis_stream_baseline(const BaselineRequest& request);
BaselineResult nats_baseline(const BaselineRequest& request);

}  // namespace outpost::bench
