#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "baseline.h"
#include "bench.h"
#include "core/redact.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/relay.h"

namespace outpost::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

double vm_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

// CPU counters at one moment: this process (all threads) and the machine (/proc/stat).
struct CpuMark {
  double process_s = 0;
  double machine_busy_ticks = 0, machine_all_ticks = 0;
};

CpuMark cpu_mark() {
  CpuMark m;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  m.process_s = secs(ru.ru_utime) + secs(ru.ru_stime);
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal &&
      cpu == "cpu") {
    m.machine_busy_ticks = user + nice + system + irq + softirq + steal;
    m.machine_all_ticks = m.machine_busy_ticks + idle + iowait;
  }
  return m;
}

BenchResult::Cpu cpu_since(const CpuMark& start, std::size_t events) {
  const CpuMark end = cpu_mark();
  BenchResult::Cpu c;
  if (events == 0) return c;
  c.process_us_per_event = (end.process_s - start.process_s) * 1e6 / double(events);
  const double busy = end.machine_busy_ticks - start.machine_busy_ticks;
  const double all = end.machine_all_ticks - start.machine_all_ticks;
  static const double ticks_per_s = double(sysconf(_SC_CLK_TCK));
  if (all > 0 && ticks_per_s > 0) {
    c.machine_us_per_event = busy / ticks_per_s * 1e6 / double(events);
    c.machine_busy = busy / all;
  }
  return c;
}

// What every relay's sink reports into: delivered count and, while recording, the
// emit-to-delivery latency of each event (occurred_at is stamped at emit). While checking, each
// delivery is also checked for per-key order and duplicates: event n of a phase has payload
// {"n":n,...} and key n % keys (make_events), so a key's events arrive in increasing n.
struct DeliveryStats {
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<bool> recording{false};
  std::mutex mu;
  std::vector<double> latencies_ms;  // guarded by mu

  // Starts checking a phase of `events` events over `keys` keys (0: no per-key order).
  void check(std::size_t events, std::size_t keys, bool ordered) {
    std::lock_guard lock(check_mu);
    seen.assign(events, 0);
    last_of_key.assign(ordered ? keys : 0, -1);
    checking = true;
  }
  void stop_checking() {
    std::lock_guard lock(check_mu);
    checking = false;
  }
  void checked(std::span<const StoredEvent> events, const std::vector<DeliveryResult>& results) {
    std::lock_guard lock(check_mu);
    if (!checking) return;
    for (std::size_t i = 0; i < events.size() && i < results.size(); ++i) {
      if (!results[i].ok()) continue;
      const std::string& p = events[i].payload;
      if (p.rfind("{\"n\":", 0) != 0) continue;
      const std::int64_t n = std::strtoll(p.c_str() + 5, nullptr, 10);
      if (n < 0 || std::size_t(n) >= seen.size()) continue;
      if (seen[std::size_t(n)]++) ++duplicates;
      if (last_of_key.empty()) continue;
      auto& last = last_of_key[std::size_t(n) % last_of_key.size()];
      if (n < last) ++order_breaks;
      last = std::max(last, n);
    }
  }

  std::mutex check_mu;
  bool checking = false;                  // guarded by check_mu
  std::vector<std::uint8_t> seen;         // per event n: times delivered; guarded by check_mu
  std::vector<std::int64_t> last_of_key;  // highest n delivered per key; guarded by check_mu
  std::uint64_t order_breaks = 0, duplicates = 0;  // guarded by check_mu
};

// The no-op handler (inner == nullptr; taking `delay` per call, a stand-in for a broker's or a
// webhook's round trip) or a counting decorator around a real sink.
class MeasuringSink final : public Sink {
 public:
  MeasuringSink(DeliveryStats& stats, std::unique_ptr<Sink> inner, Duration delay)
      : stats_(stats), inner_(std::move(inner)), delay_(delay) {}
  std::string_view name() const override { return inner_ ? inner_->name() : "noop"; }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    std::vector<DeliveryResult> results;
    if (inner_) {
      results = inner_->deliver(events);
    } else {
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      results.assign(events.size(), DeliveryResult::delivered());
    }
    std::uint64_t ok = 0;
    const bool record = stats_.recording.load(std::memory_order_relaxed);
    const TimePoint t = now();
    std::vector<double> local;
    for (std::size_t i = 0; i < events.size() && i < results.size(); ++i) {
      if (!results[i].ok()) continue;
      ++ok;
      if (record) local.push_back(double((t - events[i].occurred_at).count()) / 1000.0);
    }
    if (!local.empty()) {
      std::lock_guard lock(stats_.mu);
      stats_.latencies_ms.insert(stats_.latencies_ms.end(), local.begin(), local.end());
    }
    stats_.checked(events, results);
    stats_.delivered.fetch_add(ok, std::memory_order_relaxed);
    delivered_.fetch_add(ok, std::memory_order_relaxed);
    return results;
  }
  void close() override {
    if (inner_) inner_->close();
  }
  std::uint64_t delivered() const { return delivered_.load(); }

 private:
  DeliveryStats& stats_;
  std::unique_ptr<Sink> inner_;
  const Duration delay_;
  std::atomic<std::uint64_t> delivered_{0};  // by this relay
};

// N relays, each with its own Store object (except for in-process stores, which cannot be
// opened twice) and its own sink, running on their own threads until stop().
class RelayGroup {
 public:
  RelayGroup(const BenchOptions& o, const std::shared_ptr<Store>& shared_store,
             bool in_process_store, DeliveryStats& stats) {
    for (std::size_t i = 0; i < o.relays; ++i) {
      // Relay 0 shares the producers' Store object (as a Bus does); the others open their own.
      std::shared_ptr<Store> store = (i == 0 || in_process_store)
                                         ? shared_store
                                         : std::shared_ptr<Store>(open_store(o.store_url));
      SinkOptions sink_options;
      sink_options.concurrency = o.concurrency;
      std::unique_ptr<Sink> inner;
      if (!o.sink_url.empty()) inner = open_sink(o.sink_url, sink_options);
      auto sink = std::make_unique<MeasuringSink>(
          stats, std::move(inner), Duration(static_cast<std::int64_t>(o.sink_delay_ms)));
      RelayOptions ro;
      ro.batch_size = o.batch;
      ro.order = o.unordered ? ClaimOrder::unordered : ClaimOrder::ordered;
      ro.pipeline = !o.no_pipeline;
      ro.max_attempts = 1000;  // a benchmark retries rather than losing events to dead letters
      ro.backoff_base = Duration(10);
      ro.backoff_max = Duration(1000);
      ro.on_error = [this](const std::string& m) {
        if (errors_.fetch_add(1) < 5) std::fprintf(stderr, "bench relay: %s\n", m.c_str());
      };
      auto relay = std::make_unique<Relay>(*store, *sink, ro);
      stores_.push_back(std::move(store));
      sinks_.push_back(std::move(sink));
      relays_.push_back(std::move(relay));
    }
    for (auto& r : relays_) threads_.emplace_back([&r] { r->run(); });
  }
  ~RelayGroup() { stop(); }
  // Events delivered by each relay so far.
  std::vector<std::uint64_t> delivered() const {
    std::vector<std::uint64_t> out;
    for (const auto& s : sinks_) out.push_back(s->delivered());
    return out;
  }
  void stop() {
    for (auto& r : relays_) r->stop();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  std::atomic<int> errors_{0};
  std::vector<std::shared_ptr<Store>> stores_;
  std::vector<std::unique_ptr<MeasuringSink>> sinks_;
  std::vector<std::unique_ptr<Relay>> relays_;
  std::vector<std::thread> threads_;
};

std::string make_payload(std::size_t bytes, std::size_t n) {
  std::string head = "{\"n\":" + std::to_string(n) + ",\"pad\":\"";
  std::string p = head;
  std::size_t fill = bytes > head.size() + 2 ? bytes - head.size() - 2 : 0;
  p.append(fill, 'x');
  p += "\"}";
  return p;
}

std::vector<Event> make_events(const BenchOptions& o, std::size_t first, std::size_t count) {
  std::vector<Event> events;
  events.reserve(count);
  for (std::size_t i = first; i < first + count; ++i)
    events.push_back(Event::make("bench.event", make_payload(o.payload_bytes, i),
                                 o.keys ? "k" + std::to_string(i % o.keys) : std::string()));
  return events;
}

// Emits `total` events from `producers` threads in emit_batch-sized transactions.
void emit_all(Store& store, const BenchOptions& o, std::size_t total, std::size_t producers) {
  std::vector<std::thread> threads;
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mu;
  for (std::size_t p = 0; p < producers; ++p) {
    threads.emplace_back([&] {
      try {
        for (;;) {
          std::size_t first = next.fetch_add(o.emit_batch);
          if (first >= total) break;
          auto events = make_events(o, first, std::min(o.emit_batch, total - first));
          store.append(events);
        }
      } catch (...) {
        std::lock_guard lock(failure_mu);
        if (!failure) failure = std::current_exception();
        next.store(total);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

// Waits until `target` deliveries were counted; fails when nothing moved for `stall`.
void wait_delivered(DeliveryStats& stats, std::uint64_t target, const char* phase,
                    std::chrono::seconds stall = std::chrono::seconds(30),
                    double* peak_rss = nullptr) {
  auto last = stats.delivered.load();
  auto last_change = SteadyClock::now();
  for (;;) {
    auto d = stats.delivered.load();
    if (peak_rss) *peak_rss = std::max(*peak_rss, vm_rss_mb());
    if (d >= target) return;
    if (d != last) {
      last = d;
      last_change = SteadyClock::now();
    } else if (SteadyClock::now() - last_change > stall) {
      throw Error(ErrorCode::timeout, "bench",
                  std::string(phase) + ": only " + std::to_string(d) + " of " +
                      std::to_string(target) + " events delivered, no progress for " +
                      std::to_string(stall.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::size_t i = std::min(v.size() - 1, std::size_t(q * double(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(i), v.end());
  return v[i];
}

std::string scheme_of(const std::string& url) {
  auto c = url.find(':');
  return c == std::string::npos ? url : url.substr(0, c);
}

BaselineResult store_baseline(const BenchOptions& o, bool& have) {
  BaselineRequest req{o.store_url, o.events, o.batch, o.payload_bytes};
  std::string s = scheme_of(o.store_url);
  have = true;
#ifdef OUTPOST_HAVE_SQLITE
  if (s == "sqlite") return sqlite_baseline(req);
#endif
#ifdef OUTPOST_HAVE_POSTGRES
  if (s == "postgresql" || s == "postgres") return postgres_baseline(req);
#endif
#ifdef OUTPOST_HAVE_REDIS
  if (s == "redis") return redis_baseline(req);
#endif
  have = false;
  return {};
}

BaselineResult sink_baseline(const BenchOptions& o, bool& have) {
  BaselineRequest req{o.sink_url, o.events, o.batch, o.payload_bytes};
  std::string s = scheme_of(o.sink_url);
  have = true;
#ifdef OUTPOST_HAVE_KAFKA
  if (s == "kafka") return kafka_baseline(req);
#endif
#ifdef OUTPOST_HAVE_REDIS_STREAM
  if (s == "redis-stream") return redis_stream_baseline(req);
#endif
#ifdef OUTPOST_HAVE_NATS
  if (s == "nats") return nats_baseline(req);
#endif
  have = false;
  return {};
}

std::string fmt(double v, int precision = 1) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

void print_cpu(std::ostream& out, const BenchResult::Cpu& c) {
  out << "    cpu: " << fmt(c.process_us_per_event, 2) << " us/event in this process, "
      << fmt(c.machine_us_per_event, 2) << " us/event machine-wide, "
      << fmt(c.machine_busy * 100, 0) << "% of the cores busy\n"
      << std::flush;
}

}  // namespace

BenchResult run_bench(const BenchOptions& o, std::ostream& out) {
  if (o.store_url.empty()) throw ConfigError("bench: --store is required");
  if (o.events == 0) throw ConfigError("bench: --events must be >= 1");
  if (o.producers == 0) throw ConfigError("bench: --producers must be >= 1");
  if (o.relays == 0) throw ConfigError("bench: --relays must be >= 1");
  if (o.batch == 0) throw ConfigError("bench: --batch must be >= 1");
  if (o.emit_batch == 0) throw ConfigError("bench: --emit-batch must be >= 1");
  if (o.latency_seconds > 0 && o.rate <= 0) throw ConfigError("bench: --rate must be > 0");
  if (o.sink_delay_ms > 0 && !o.sink_url.empty())
    throw ConfigError("bench: --sink-delay-ms applies to the no-op sink only (drop --sink)");

  const std::string scheme = scheme_of(o.store_url);
  const bool in_process = scheme == "memory" || o.store_url.find(":memory:") != std::string::npos;
  // Usage errors before anything is created: the store's URL is checked without opening it and
  // a sink checks its URL before it creates or connects anything, so the sink goes first.
  check_store_url(o.store_url);
  if (!o.sink_url.empty()) open_sink(o.sink_url)->close();  // fail fast on a bad sink URL
  std::shared_ptr<Store> store(open_store(o.store_url));
  {
    auto st = store->stats();
    if (st.pending + st.leased > 0)
      throw ConfigError("bench: the store at --store already holds " +
                        std::to_string(st.pending + st.leased) +
                        " undelivered events; use an empty store (e.g. a new sqlite file)");
  }
  BenchResult r;
  r.events = o.events;
  out << "outpost bench: store " << core::redact_url(o.store_url) << ", sink "
      << (o.sink_url.empty() ? std::string("in-process no-op handler")
                             : core::redact_url(o.sink_url))
      << "\n"
      << "  " << o.events << " events of " << o.payload_bytes << " B, " << o.producers
      << " producer(s) x emit_many(" << o.emit_batch << "), " << o.relays << " relay(s), batch "
      << o.batch << ", " << (o.unordered ? "unordered" : "ordered") << ", " << o.keys << " keys\n"
      << std::flush;

  DeliveryStats stats;
  // Phase 1: throughput, producers and relays running together.
  {
    stats.check(o.events, o.keys, !o.unordered);
    double emit_s = 0;
    if (o.prefill) {
      auto e0 = SteadyClock::now();
      emit_all(*store, o, o.events, o.producers);
      emit_s = seconds_since(e0);
    }
    RelayGroup relays(o, store, in_process, stats);
    const CpuMark cpu0 = cpu_mark();
    auto t0 = SteadyClock::now();
    if (!o.prefill) {
      emit_all(*store, o, o.events, o.producers);
      emit_s = seconds_since(t0);
    }
    wait_delivered(stats, o.events, "throughput phase");
    r.seconds = seconds_since(t0);
    r.cpu = cpu_since(cpu0, o.events);
    r.events_per_s = double(o.events) / r.seconds;
    r.emit_events_per_s = double(o.events) / emit_s;
    for (auto d : relays.delivered()) r.per_relay_events_per_s.push_back(double(d) / r.seconds);
    relays.stop();
  }
  out << "  throughput: " << fmt(r.events_per_s, 0) << " events/s "
      << (o.prefill ? "draining the prefilled backlog (" : "end-to-end (") << fmt(r.seconds, 2)
      << " s; producers alone " << fmt(r.emit_events_per_s, 0) << " events/s)\n";
  print_cpu(out, r.cpu);
  if (o.relays > 1) {
    out << "  per relay events/s:";
    for (double v : r.per_relay_events_per_s) out << " " << fmt(v, 0);
    out << "\n";
    // Phase 1b: the same phase with one relay on the same (now drained) store, for the
    // scale-out ratio in one run.
    BenchOptions one = o;
    one.relays = 1;
    std::uint64_t base = stats.delivered.load();
    stats.check(o.events, o.keys, !o.unordered);
    if (o.prefill) emit_all(*store, one, o.events, o.producers);
    RelayGroup relays(one, store, in_process, stats);
    auto t0 = SteadyClock::now();
    if (!o.prefill) emit_all(*store, one, o.events, o.producers);
    wait_delivered(stats, base + o.events, "single-relay phase");
    r.single_relay_events_per_s = double(o.events) / seconds_since(t0);
    r.scale_out = r.events_per_s / r.single_relay_events_per_s;
    relays.stop();
    out << "  one relay: " << fmt(r.single_relay_events_per_s, 0) << " events/s; scale-out "
        << o.relays << " relays / 1: " << fmt(r.scale_out, 2) << "x\n";
  }
  stats.stop_checking();
  {
    std::lock_guard lock(stats.check_mu);
    r.order_breaks = stats.order_breaks;
    r.duplicates = stats.duplicates;
  }
  out << "  order breaks " << r.order_breaks << ", duplicates " << r.duplicates
      << (o.unordered || o.keys == 0 ? " (no per-key order checked)" : "") << "\n"
      << std::flush;

  // Phase 2: latency at a steady rate, one event per transaction.
  if (o.latency_seconds > 0) {
    RelayGroup relays(o, store, in_process, stats);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // relays idle and waiting
    std::uint64_t base = stats.delivered.load();
    stats.recording.store(true);
    auto total = std::size_t(o.rate * o.latency_seconds);
    auto interval = std::chrono::duration<double>(1.0 / o.rate);
    auto t0 = SteadyClock::now();
    for (std::size_t i = 0; i < total; ++i) {
      auto due = t0 + std::chrono::duration_cast<SteadyClock::duration>(interval * double(i));
      std::this_thread::sleep_until(due);
      auto events = make_events(o, i, 1);
      store->append(events);
    }
    wait_delivered(stats, base + total, "latency phase");
    stats.recording.store(false);
    relays.stop();
    std::lock_guard lock(stats.mu);
    auto& v = stats.latencies_ms;
    r.latency_samples = v.size();
    r.max_ms = v.empty() ? 0 : *std::max_element(v.begin(), v.end());
    r.p50_ms = percentile(v, 0.50);
    r.p99_ms = percentile(v, 0.99);
    v.clear();
    v.shrink_to_fit();
    out << "  latency at " << fmt(o.rate, 0) << " events/s for " << fmt(o.latency_seconds, 1)
        << " s: p50 " << fmt(r.p50_ms, 3) << " ms, p99 " << fmt(r.p99_ms, 3) << " ms, max "
        << fmt(r.max_ms, 3) << " ms (" << r.latency_samples << " samples)\n"
        << std::flush;
  }

  // Phase 3: RSS while draining a small and a large backlog (relay memory must not grow with
  // the backlog; in-process stores hold the backlog itself in memory, by design).
  if (o.backlog_check) {
    r.backlog_small = std::min<std::size_t>(10'000, o.events);
    r.backlog_large = o.events;
    for (int pass = 0; pass < 2; ++pass) {
      std::size_t n = pass == 0 ? r.backlog_small : r.backlog_large;
      emit_all(*store, o, n, 1);
      double peak = vm_rss_mb();
      std::uint64_t base = stats.delivered.load();
      RelayGroup relays(o, store, in_process, stats);
      wait_delivered(stats, base + n, "backlog phase", std::chrono::seconds(30), &peak);
      relays.stop();
      (pass == 0 ? r.rss_backlog_small_mb : r.rss_backlog_large_mb) = peak;
    }
    out << "  RSS draining a backlog of " << r.backlog_small << ": " << fmt(r.rss_backlog_small_mb)
        << " MB; of " << r.backlog_large << ": " << fmt(r.rss_backlog_large_mb) << " MB\n"
        << std::flush;
  }

  // Phase 4: the raw engine doing the same rows, in the same run.
  if (o.baseline) {
    bool have = false;
    auto b = store_baseline(o, have);
    if (have) {
      r.baseline_events_per_s = b.events_per_s;
      r.baseline_what = b.what;
      r.ratio = b.events_per_s > 0 ? r.events_per_s / b.events_per_s : 0;
      out << "  baseline: " << fmt(b.events_per_s, 0) << " events/s (" << b.what << ")\n";
    } else {
      out << "  baseline: none for store scheme '" << scheme << "' in this build\n";
    }
    if (!o.sink_url.empty()) {
      // The store's ceiling: the same relay and producers into a no-op sink, same store.
      BenchOptions noop = o;
      noop.sink_url.clear();
      DeliveryStats noop_stats;
      {
        RelayGroup relays(noop, store, in_process, noop_stats);
        const CpuMark cpu0 = cpu_mark();
        auto t0 = SteadyClock::now();
        emit_all(*store, noop, o.events, o.producers);
        wait_delivered(noop_stats, o.events, "store ceiling phase");
        r.store_ceiling_events_per_s = double(o.events) / seconds_since(t0);
        r.store_ceiling_cpu = cpu_since(cpu0, o.events);
        relays.stop();
      }
      out << "  store ceiling (same relay, no-op sink): " << fmt(r.store_ceiling_events_per_s, 0)
          << " events/s\n";
      print_cpu(out, r.store_ceiling_cpu);
      const CpuMark cpu0 = cpu_mark();
      auto sb = sink_baseline(o, have);
      r.sink_baseline_cpu = cpu_since(cpu0, o.events);
      if (have) {
        r.sink_baseline_events_per_s = sb.events_per_s;
        r.sink_baseline_what = sb.what;
        r.sink_ratio = sb.events_per_s > 0 ? r.events_per_s / sb.events_per_s : 0;
        double lower = std::min(sb.events_per_s, r.store_ceiling_events_per_s);
        r.lower_ceiling_ratio = lower > 0 ? r.events_per_s / lower : 0;
        if (lower > 0) {
          r.serial_ceiling_events_per_s =
              1.0 / (1.0 / sb.events_per_s + 1.0 / r.store_ceiling_events_per_s);
          r.serial_ceiling_ratio = r.events_per_s / r.serial_ceiling_events_per_s;
        }
        out << "  sink baseline: " << fmt(sb.events_per_s, 0) << " events/s (" << sb.what << ")\n";
        print_cpu(out, r.sink_baseline_cpu);
      }
    }
  }
  r.peak_rss_mb = peak_rss_mb();

  out << "\n"
      << "  metric                      value\n"
      << "  events                      " << r.events << "\n"
      << "  events/s (end-to-end)       " << fmt(r.events_per_s, 0) << "\n"
      << "  p50 / p99 / max latency ms  " << fmt(r.p50_ms, 3) << " / " << fmt(r.p99_ms, 3) << " / "
      << fmt(r.max_ms, 3) << "\n"
      << "  peak RSS MB                 " << fmt(r.peak_rss_mb) << "\n"
      << "  baseline events/s           " << fmt(r.baseline_events_per_s, 0) << "\n"
      << "  ratio                       " << fmt(r.ratio, 2) << "\n";
  if (r.sink_baseline_events_per_s > 0)
    out << "  sink baseline events/s      " << fmt(r.sink_baseline_events_per_s, 0) << "\n"
        << "  sink ratio                  " << fmt(r.sink_ratio, 2) << "\n"
        << "  store ceiling events/s      " << fmt(r.store_ceiling_events_per_s, 0) << "\n"
        << "  ratio to lower ceiling      " << fmt(r.lower_ceiling_ratio, 2) << "\n"
        << "  serial ceiling events/s     " << fmt(r.serial_ceiling_events_per_s, 0) << "\n"
        << "  ratio to serial ceiling     " << fmt(r.serial_ceiling_ratio, 2) << "\n";
  out << std::flush;
  return r;
}

std::string BenchResult::to_json(const BenchOptions& o) const {
  auto num = [](double v) {
    std::ostringstream s;
    s << std::setprecision(6) << (std::isfinite(v) ? v : 0.0);
    return s.str();
  };
  auto str = [](const std::string& v) {
    std::string q = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') q += '\\';
      if (static_cast<unsigned char>(c) < 0x20) continue;
      q += c;
    }
    return q + "\"";
  };
  std::ostringstream j;
  j << "{\"events\":" << events << ",\"events_per_s\":" << num(events_per_s)
    << ",\"p50_ms\":" << num(p50_ms) << ",\"p99_ms\":" << num(p99_ms)
    << ",\"max_ms\":" << num(max_ms) << ",\"peak_rss_mb\":" << num(peak_rss_mb)
    << ",\"baseline_events_per_s\":" << num(baseline_events_per_s) << ",\"ratio\":" << num(ratio)
    << ",\"seconds\":" << num(seconds) << ",\"emit_events_per_s\":" << num(emit_events_per_s)
    << ",\"latency_rate\":" << num(o.latency_seconds > 0 ? o.rate : 0)
    << ",\"latency_samples\":" << latency_samples
    << ",\"rss_backlog_small_mb\":" << num(rss_backlog_small_mb)
    << ",\"backlog_small\":" << backlog_small
    << ",\"rss_backlog_large_mb\":" << num(rss_backlog_large_mb)
    << ",\"backlog_large\":" << backlog_large << ",\"baseline\":" << str(baseline_what)
    << ",\"store\":" << str(core::redact_url(o.store_url))
    << ",\"sink\":" << str(o.sink_url.empty() ? "noop" : core::redact_url(o.sink_url))
    << ",\"producers\":" << o.producers << ",\"relays\":" << o.relays << ",\"batch\":" << o.batch
    << ",\"emit_batch\":" << o.emit_batch << ",\"payload_bytes\":" << o.payload_bytes
    << ",\"ordered\":" << (o.unordered ? "false" : "true")
    << ",\"pipeline\":" << (o.no_pipeline ? "false" : "true")
    << ",\"prefill\":" << (o.prefill ? "true" : "false") << ",\"sink_delay_ms\":" << o.sink_delay_ms
    << ",\"per_relay_events_per_s\":[";
  for (std::size_t i = 0; i < per_relay_events_per_s.size(); ++i)
    j << (i ? "," : "") << num(per_relay_events_per_s[i]);
  j << "],\"single_relay_events_per_s\":" << num(single_relay_events_per_s)
    << ",\"scale_out\":" << num(scale_out) << ",\"order_breaks\":" << order_breaks
    << ",\"duplicates\":" << duplicates;
  if (!o.sink_url.empty())
    j << ",\"sink_baseline_events_per_s\":" << num(sink_baseline_events_per_s)
      << ",\"sink_ratio\":" << num(sink_ratio) << ",\"sink_baseline\":" << str(sink_baseline_what)
      << ",\"store_ceiling_events_per_s\":" << num(store_ceiling_events_per_s)
      << ",\"lower_ceiling_ratio\":" << num(lower_ceiling_ratio)
      << ",\"serial_ceiling_events_per_s\":" << num(serial_ceiling_events_per_s)
      << ",\"serial_ceiling_ratio\":" << num(serial_ceiling_ratio);
  auto cpu_fields = [&](const char* prefix, const Cpu& c) {
    j << ",\"" << prefix << "cpu_us_per_event\":" << num(c.process_us_per_event) << ",\"" << prefix
      << "machine_cpu_us_per_event\":" << num(c.machine_us_per_event) << ",\"" << prefix
      << "machine_busy\":" << num(c.machine_busy);
  };
  cpu_fields("", cpu);
  if (!o.sink_url.empty() && o.baseline) {
    cpu_fields("store_ceiling_", store_ceiling_cpu);
    cpu_fields("sink_baseline_", sink_baseline_cpu);
  }
  j << "}";
  return j.str();
}

}  // namespace outpost::bench
