// The handler-table sink. The hot path (concurrency 1) is one table snapshot per batch and one
// hash lookup per event; the concurrent path groups the batch into per-key lanes with a counting
// sort into reused buffers, and runs the lanes on a persistent pool plus the calling thread.

#include "outpost/sinks/handlers.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "outpost/error.h"

namespace outpost {
namespace {

// Immutable once published; on/off/use publish a modified copy (handlers change rarely, batches
// are frequent, so readers only copy a shared_ptr).
struct Table {
  std::unordered_map<std::string, Handler> handlers;
  std::vector<HandleMiddleware> middlewares;
};

}  // namespace

struct HandlerSink::Impl {
  explicit Impl(HandlerSinkOptions o) : options(std::move(o)) {
    if (options.concurrency == 0) throw ConfigError("handler concurrency must be at least 1");
    table = std::make_shared<const Table>();
    for (std::size_t i = 1; i < options.concurrency; ++i) workers.emplace_back([this] { work(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu);
      shutting_down = true;
    }
    job_cv.notify_all();
    for (auto& t : workers) t.join();
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

  DeliveryResult run_one(const StoredEvent& e, const Table& t) {
    try {
      for (const auto& mw : t.middlewares)
        if (!mw(e)) return DeliveryResult::delivered();  // dropped: acked unhandled
      auto it = t.handlers.find(e.type);
      if (it == t.handlers.end()) {
        if (options.ignore_unknown_types) return DeliveryResult::delivered();
        return DeliveryResult::failed("no handler for event type '" + e.type + "'");
      }
      it->second(e);
    } catch (const std::exception& ex) {
      std::string what = ex.what();
      if (what.empty()) what = "handler for '" + e.type + "' threw an exception without a message";
      return DeliveryResult::failed(std::move(what));
    } catch (...) {
      return DeliveryResult::failed("handler for '" + e.type + "' threw a non-standard exception");
    }
    if (options.on_handled) {
      try {
        options.on_handled(e);
      } catch (...) {  // documented as must-not-throw; never turn a delivery into a failure
      }
    }
    return DeliveryResult::delivered();
  }

  // Runs lane `lane` of the current job; results go to distinct slots, so no locking.
  void run_lane(std::size_t lane) {
    bool failed = false;
    for (std::uint32_t k = lane_begin[lane]; k < lane_begin[lane + 1]; ++k) {
      std::uint32_t i = order[k];
      const StoredEvent& e = job_events[i];
      if (failed) {
        (*job_results)[i] =
            DeliveryResult::skipped("an earlier event of key '" + e.key + "' failed in this batch");
        continue;
      }
      (*job_results)[i] = run_one(e, *job_table);
      failed = !(*job_results)[i].ok();
    }
  }

  // Takes lanes until none is left. Returns after the last lane it took is finished.
  void drain_lanes() {
    std::size_t lanes = lane_begin.size() - 1;
    for (;;) {
      std::size_t lane = next_lane.fetch_add(1, std::memory_order_relaxed);
      if (lane >= lanes) return;
      run_lane(lane);
      if (lanes_done.fetch_add(1, std::memory_order_acq_rel) + 1 == lanes) {
        std::lock_guard lock(mu);
        done_cv.notify_all();
      }
    }
  }

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu);
        job_cv.wait(lock, [&] { return shutting_down || (job_open && job_gen != seen); });
        if (shutting_down) return;
        seen = job_gen;
        ++active;
      }
      drain_lanes();
      {
        std::lock_guard lock(mu);
        if (--active == 0) done_cv.notify_all();
      }
    }
  }

  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) {
    std::vector<DeliveryResult> results(events.size());
    auto t = snapshot();
    if (workers.empty()) {
      // Inline: one lane per key is implicit since everything runs in order on this thread;
      // only the "skip after a failure of the same key" rule needs tracking.
      failed_keys.clear();
      for (std::size_t i = 0; i < events.size(); ++i) {
        const StoredEvent& e = events[i];
        if (!failed_keys.empty() && !e.key.empty() && failed_keys.contains(e.key)) {
          results[i] = DeliveryResult::skipped("an earlier event of key '" + e.key +
                                               "' failed in this batch");
          continue;
        }
        results[i] = run_one(e, *t);
        if (!results[i].ok() && !e.key.empty()) failed_keys.emplace(e.key);
      }
      return results;
    }

    build_lanes(events);
    job_events = events;
    job_results = &results;
    job_table = t.get();
    next_lane.store(0, std::memory_order_relaxed);
    lanes_done.store(0, std::memory_order_relaxed);
    std::size_t lanes = lane_begin.size() - 1;
    {
      std::lock_guard lock(mu);
      ++job_gen;
      job_open = true;
    }
    job_cv.notify_all();
    drain_lanes();
    {
      std::unique_lock lock(mu);
      done_cv.wait(lock, [&] { return lanes_done.load(std::memory_order_acquire) == lanes; });
      job_open = false;  // workers that have not picked the job up yet must not join it now
      done_cv.wait(lock, [&] { return active == 0; });
    }
    return results;
  }

  // Groups events into lanes (stable counting sort into `order`, lanes in first-seen order).
  void build_lanes(std::span<const StoredEvent> events) {
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
    lane_begin.assign(lanes + 1, 0);
    for (std::size_t i = 0; i < events.size(); ++i) ++lane_begin[lane_of[i] + 1];
    for (std::uint32_t l = 0; l < lanes; ++l) lane_begin[l + 1] += lane_begin[l];
    fill.assign(lane_begin.begin(), lane_begin.end() - 1);
    order.resize(events.size());
    for (std::size_t i = 0; i < events.size(); ++i)
      order[fill[lane_of[i]]++] = static_cast<std::uint32_t>(i);
  }

  const HandlerSinkOptions options;

  std::mutex table_mu;
  std::shared_ptr<const Table> table;  // guarded by table_mu

  // Reused per-batch buffers; only the delivering thread writes them before publishing a job.
  std::unordered_map<std::string_view, std::uint32_t> lane_index;
  std::vector<std::uint32_t> lane_of, lane_begin, fill, order;
  struct KeySet {
    std::vector<std::string> keys;
    void clear() { keys.clear(); }
    bool empty() const { return keys.empty(); }
    bool contains(const std::string& k) const {
      for (const auto& x : keys)
        if (x == k) return true;
      return false;
    }
    void emplace(const std::string& k) { keys.push_back(k); }
  } failed_keys;  // failures are rare: a small vector beats a hash set

  // The current job, published under mu via job_gen/job_open.
  std::span<const StoredEvent> job_events;
  std::vector<DeliveryResult>* job_results = nullptr;
  const Table* job_table = nullptr;
  std::atomic<std::size_t> next_lane{0};
  std::atomic<std::size_t> lanes_done{0};

  std::mutex mu;
  std::condition_variable job_cv, done_cv;
  std::uint64_t job_gen = 0;   // guarded by mu
  bool job_open = false;       // guarded by mu
  std::size_t active = 0;      // workers inside the current job; guarded by mu
  bool shutting_down = false;  // guarded by mu
  std::vector<std::thread> workers;
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
  return impl_->deliver(events);
}

void HandlerSink::close() {}  // deliveries are synchronous: nothing is ever buffered

}  // namespace outpost
