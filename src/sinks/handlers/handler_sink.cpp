// The handler-table sink. Each deliver() groups the batch into per-key lanes (a counting sort)
// and hands them to a pool of `concurrency` threads, while the calling thread watches the
// relay's DeliveryControl: at the deadline (or when a stop gives up) it returns without the
// handlers still running, whose threads are abandoned, replaced in the pool, and whose keys are
// held back until they return. So a handler that never returns costs one thread and its own
// key, never the relay.

#include "outpost/sinks/handlers.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/sink_batch.h"
#include "outpost/error.h"

namespace outpost {
namespace {

// Immutable once published; on/off/use publish a modified copy (handlers change rarely, batches
// are frequent, so readers only copy a shared_ptr).
struct Table {
  std::unordered_map<std::string, Handler> handlers;
  std::vector<HandleMiddleware> middlewares;
};

// One deliver() call. Workers and the caller share it through a shared_ptr: a worker whose
// handler overran the call's deadline still holds it (and the copy of its event) after the call
// returned, so nothing it touches is freed under it.
struct Job {
  std::vector<StoredEvent> events;  // copies: an abandoned handler may still hold one
  std::vector<DeliveryResult> results;
  std::vector<std::uint32_t> order, lane_begin;  // lanes by key (counting sort)
  std::shared_ptr<const Table> table;
  // Guarded by Shared::mu:
  std::size_t next_lane = 0;
  std::size_t lanes_done = 0;
  std::vector<std::int64_t> running;  // per lane: index of the event whose handler runs, or -1
  std::vector<char> blocked;          // per lane: held back behind a hung key, run nothing
  bool stopping = false;              // the relay is stopping: start no further event
  // A handler said its downstream is unavailable (UnavailableError): start no further event;
  // the relay pauses the sink (docs/sinks.md, "Failure classes (handlers)").
  std::optional<DeliveryResult> unavailable;
  bool closed = false;  // the caller returned: workers leave the job
  std::size_t lanes() const { return lane_begin.size() - 1; }
};

// State shared with the worker threads, which are detached: a worker abandoned inside a handler
// that never returns keeps this alive instead of the sink.
struct Shared {
  explicit Shared(HandlerSinkOptions o) : options(std::move(o)) {}
  const HandlerSinkOptions options;
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::shared_ptr<Job> job;                        // guarded by mu: the current call's
  std::unordered_map<std::string, int> hung_keys;  // guarded by mu: abandoned handlers per key
  std::size_t workers = 0;                         // guarded by mu: pool threads (not abandoned)
  bool shutting_down = false;                      // guarded by mu

  // `handled`: set when a handler ran and returned (on_handled is due).
  DeliveryResult run_one(const StoredEvent& e, const Table& t, bool& handled) const {
    // Events the handler emits on this thread carry e's correlation id, e's id as causation id
    // and e's trace context unless they give their own (outpost/event.h, HandlingScope).
    const HandlingScope scope(e);
    try {
      for (const auto& mw : t.middlewares)
        if (!mw(e)) return DeliveryResult::delivered();  // dropped: acked unhandled
      auto it = t.handlers.find(e.type);
      if (it == t.handlers.end()) {
        if (options.ignore_unknown_types) return DeliveryResult::delivered();
        return DeliveryResult::failed("no handler for event type '" + e.type + "'");
      }
      it->second(e);
    } catch (...) {
      return HandlerSink::classify(std::current_exception(), e.type);
    }
    handled = true;
    return DeliveryResult::delivered();
  }

  // A pool thread: takes lanes of the current job. Returns when the sink shuts down, or when
  // its handler outlived the call that ran it (it was replaced; see Impl::give_up).
  static void work(std::shared_ptr<Shared> self) {
    std::unique_lock lock(self->mu);
    for (;;) {
      self->work_cv.wait(lock, [&] {
        return self->shutting_down ||
               (self->job && !self->job->closed && self->job->next_lane < self->job->lanes());
      });
      if (self->shutting_down) break;
      std::shared_ptr<Job> job = self->job;
      const std::size_t lane = job->next_lane++;
      if (!self->run_lane(*job, lane, lock)) return;  // abandoned: no longer in the pool
      if (++job->lanes_done == job->lanes()) self->done_cv.notify_all();
    }
    --self->workers;
    self->done_cv.notify_all();
  }

  // Runs one lane in order; `lock` is held on entry and exit, released around each handler.
  // false: the call gave up on this lane while a handler ran (this thread was abandoned).
  bool run_lane(Job& job, std::size_t lane, std::unique_lock<std::mutex>& lock) {
    if (job.blocked[lane]) return true;
    bool failed = false;
    for (std::uint32_t k = job.lane_begin[lane]; k < job.lane_begin[lane + 1]; ++k) {
      const std::uint32_t i = job.order[k];
      const StoredEvent& e = job.events[i];
      if (job.closed || job.stopping) return true;  // the rest stay `skipped`
      if (failed) {
        job.results[i] = DeliveryResult::held_back(e.key);
        continue;
      }
      if (job.unavailable) {  // another lane found the downstream unavailable: do not start
        job.results[i] = core::not_sent_while_unavailable(*job.unavailable);
        failed = true;
        continue;
      }
      job.running[lane] = i;
      lock.unlock();
      bool handled = false;
      DeliveryResult r = run_one(e, *job.table, handled);
      lock.lock();
      job.running[lane] = -1;
      if (job.closed) {  // the call returned without this result: this thread was replaced
        if (!e.key.empty() && --hung_keys[e.key] == 0) hung_keys.erase(e.key);
        return false;  // and no on_handled: its owner (the Bus) may be gone
      }
      if (handled && options.on_handled) {
        // Under mu, so a call that gives up cannot return (and its owner go away) meanwhile.
        try {
          options.on_handled(e);
        } catch (...) {  // documented as must-not-throw; never turn a delivery into a failure
        }
      }
      failed = !r.ok();
      if (r.status == DeliveryResult::Status::unavailable && !job.unavailable) job.unavailable = r;
      job.results[i] = std::move(r);
    }
    return true;
  }
};

}  // namespace

// A refusal keeps the handler's own words as the event's error, unprefixed (the Handler
// contract in handlers.h); an unavailable outcome says so first, as every sink's does.
DeliveryResult HandlerSink::classify(std::exception_ptr thrown, std::string_view type) {
  try {
    std::rethrow_exception(thrown);
  } catch (const UnavailableError& ex) {
    std::string what = ex.what();
    if (what.empty()) what = "handler for '" + std::string(type) + "' is unavailable";
    return core::unavailable(what, ex.retry_after());
  } catch (const std::exception& ex) {
    std::string what = ex.what();
    if (what.empty())
      what = "handler for '" + std::string(type) + "' threw an exception without a message";
    return DeliveryResult::failed(std::move(what));
  } catch (...) {
    return DeliveryResult::failed("handler for '" + std::string(type) +
                                  "' threw a non-standard exception");
  }
}

struct HandlerSink::Impl {
  explicit Impl(HandlerSinkOptions o) : shared(std::make_shared<Shared>(std::move(o))) {
    if (shared->options.concurrency == 0)
      throw ConfigError("handler concurrency must be at least 1");
    std::lock_guard lock(shared->mu);
    for (std::size_t i = 0; i < shared->options.concurrency; ++i) spawn_worker();
  }

  ~Impl() {
    std::unique_lock lock(shared->mu);
    shared->shutting_down = true;
    shared->work_cv.notify_all();
    // Pool threads finish their lane (deliver() is not running); abandoned ones keep `shared`.
    shared->done_cv.wait(lock, [&] { return shared->workers == 0; });
  }

  void spawn_worker() {  // mu held
    std::thread(&Shared::work, shared).detach();
    ++shared->workers;
  }

  std::shared_ptr<const Table> snapshot() {
    std::lock_guard lock(table_mu);
    return table;
  }

  template <typename F>
  void modify(F&& f) {
    std::lock_guard lock(table_mu);
    auto next = std::make_shared<Table>(*table);
    f(*next);
    table = std::move(next);
  }

  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events,
                                      const DeliveryControl& control) {
    if (events.empty()) return {};
    auto job = std::make_shared<Job>();
    job->events.assign(events.begin(), events.end());
    job->results.assign(events.size(), DeliveryControl::not_started());
    job->table = snapshot();
    build_lanes(*job);
    job->running.assign(job->lanes(), -1);
    job->blocked.assign(job->lanes(), 0);

    std::unique_lock lock(shared->mu);
    hold_back_hung_keys(*job);
    shared->job = job;
    shared->work_cv.notify_all();
    for (;;) {
      if (job->lanes_done == job->lanes()) break;
      const auto now = DeliveryControl::Clock::now();
      if (now >= control.deadline()) {
        give_up(*job, DeliveryResult::failed(control.timed_out_error()));
        break;
      }
      if (control.stopping()) {
        job->next_lane = job->lanes();  // start no lane and no further event
        job->stopping = true;
        if (now >= control.abandon_at()) {
          give_up(*job, DeliveryControl::abandoned());
          break;
        }
        if (std::none_of(job->running.begin(), job->running.end(),
                         [](std::int64_t i) { return i >= 0; }))
          break;
      }
      shared->done_cv.wait_until(lock, std::min({control.deadline(), control.abandon_at(),
                                                 now + DeliveryControl::kPollInterval}));
    }
    job->closed = true;
    if (shared->job == job) shared->job.reset();
    return std::move(job->results);
  }

  // Events of a key whose handler was abandoned still running fail (with backoff) instead of
  // running beside it: a key's events never run concurrently.
  void hold_back_hung_keys(Job& job) {  // mu held
    if (shared->hung_keys.empty()) return;
    for (std::size_t i = 0; i < job.events.size(); ++i) {
      const auto& key = job.events[i].key;
      if (key.empty() || !shared->hung_keys.contains(key)) continue;
      job.results[i] = DeliveryResult::failed(
          "the handler of an earlier event of key '" + key +
          "' is still running past its deliver timeout (its thread was abandoned)");
    }
    // A lane is one key: its first event failed above, its later ones are skipped.
    for (std::size_t lane = 0; lane < job.lanes(); ++lane) {
      auto first = job.order[job.lane_begin[lane]];
      if (job.results[first].status != DeliveryResult::Status::failed) continue;
      job.blocked[lane] = 1;
      for (auto k = job.lane_begin[lane] + 1; k < job.lane_begin[lane + 1]; ++k)
        job.results[job.order[k]] = DeliveryResult::held_back(job.events[first].key);
    }
  }

  // The call ends now: each handler still running gets `outcome`, its thread is abandoned
  // (replaced in the pool) and its key held back until it returns.
  void give_up(Job& job, const DeliveryResult& outcome) {  // mu held
    job.next_lane = job.lanes();
    for (std::int64_t i : job.running) {
      if (i < 0) continue;
      const auto& e = job.events[static_cast<std::size_t>(i)];
      job.results[static_cast<std::size_t>(i)] = outcome;
      if (outcome.status == DeliveryResult::Status::failed)
        job.results[static_cast<std::size_t>(i)].error +=
            "; its handler thread is abandoned still running" +
            (e.key.empty() ? std::string() : " (key '" + e.key + "' is held until it returns)");
      if (!e.key.empty()) ++shared->hung_keys[e.key];
      --shared->workers;
      spawn_worker();
    }
  }

  // Groups events into lanes (stable counting sort into `order`, lanes in first-seen order).
  void build_lanes(Job& job) {
    const auto& events = job.events;
    lane_of.resize(events.size());
    lane_index.clear();
    std::uint32_t lanes = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const std::string& key = events[i].key;
      if (key.empty()) {
        lane_of[i] = lanes++;
      } else {
        auto [it, inserted] = lane_index.try_emplace(std::string_view(key), lanes);
        if (inserted) ++lanes;
        lane_of[i] = it->second;
      }
    }
    job.lane_begin.assign(lanes + 1, 0);
    for (std::size_t i = 0; i < events.size(); ++i) ++job.lane_begin[lane_of[i] + 1];
    for (std::uint32_t l = 0; l < lanes; ++l) job.lane_begin[l + 1] += job.lane_begin[l];
    fill.assign(job.lane_begin.begin(), job.lane_begin.end() - 1);
    job.order.resize(events.size());
    for (std::size_t i = 0; i < events.size(); ++i)
      job.order[fill[lane_of[i]]++] = static_cast<std::uint32_t>(i);
  }

  std::shared_ptr<Shared> shared;

  std::mutex table_mu;
  std::shared_ptr<const Table> table = std::make_shared<const Table>();  // guarded by table_mu

  // Reused per-call buffers of the delivering thread.
  std::unordered_map<std::string_view, std::uint32_t> lane_index;
  std::vector<std::uint32_t> lane_of, fill;
};

HandlerSink::HandlerSink(HandlerSinkOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HandlerSink::~HandlerSink() = default;

void HandlerSink::on(const std::string& type, Handler handler) {
  if (type.empty()) throw ConfigError("handler event type must not be empty");
  if (!handler) throw ConfigError("handler for '" + type + "' is empty");
  impl_->modify([&](Table& t) {
    if (t.handlers.contains(type))
      throw Error(ErrorCode::conflict, "handlers",
                  "a handler for event type '" + type +
                      "' is already registered (one handler per type; fan out by emitting "
                      "new events)");
    t.handlers.emplace(type, std::move(handler));
  });
}

void HandlerSink::off(const std::string& type) {
  impl_->modify([&](Table& t) { t.handlers.erase(type); });
}

void HandlerSink::use(HandleMiddleware middleware) {
  if (!middleware) throw ConfigError("handle middleware is empty");
  impl_->modify([&](Table& t) { t.middlewares.push_back(std::move(middleware)); });
}

std::vector<DeliveryResult> HandlerSink::deliver(std::span<const StoredEvent> events) {
  const DeliveryControl unbounded;
  return impl_->deliver(events, unbounded);
}

std::vector<DeliveryResult> HandlerSink::deliver_bounded(std::span<const StoredEvent> events,
                                                         const DeliveryControl& control) {
  return impl_->deliver(events, control);
}

void HandlerSink::close() {}  // deliveries are synchronous: nothing is ever buffered

}  // namespace outpost
