// Throughput of a broker sink alone: deliver() called in a loop on batches of events, no store,
// no relay. Events look like `outpost bench`'s (type bench.event, ~200-byte JSON payload, keys
// round robin over 1000), with fresh ids per batch so JetStream does not drop them as duplicates.
//
// Usage: outpost_broker_sink_bench SINK_URL [batches=50] [batch=1000] [payload_bytes=200]
//   SINK_URL: kafka://..., redis-stream://..., nats://...?stream=S&create=1
// Prints one line: events/s over all batches (building the batches is not timed), plus
// p50/max per deliver() call. Not a test (no pass/fail): the figures go into docs/benchmarks.md.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/sinks/kafka.h"
#include "outpost/sinks/nats.h"
#include "outpost/sinks/redis_stream.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

std::unique_ptr<outpost::Sink> open(std::string_view url) {
  if (url.starts_with("kafka://")) return outpost::open_kafka_sink(url);
  if (url.starts_with("redis-stream://")) return outpost::open_redis_stream_sink(url);
  if (url.starts_with("nats://")) return outpost::open_nats_sink(url);
  std::fprintf(stderr, "unsupported sink URL (kafka://, redis-stream://, nats://)\n");
  std::exit(2);
}

std::vector<outpost::StoredEvent> make_batch(std::size_t first, std::size_t count,
                                             std::size_t payload_bytes) {
  std::vector<outpost::StoredEvent> batch;
  batch.reserve(count);
  for (std::size_t i = first; i < first + count; ++i) {
    std::string payload = "{\"n\":" + std::to_string(i) + ",\"pad\":\"";
    payload.append(payload_bytes > payload.size() + 2 ? payload_bytes - payload.size() - 2 : 0,
                   'x');
    payload += "\"}";
    outpost::StoredEvent e;
    static_cast<outpost::Event&>(e) =
        outpost::Event::make("bench.event", std::move(payload), "k" + std::to_string(i % 1000));
    e.seq = static_cast<std::int64_t>(i + 1);
    e.attempts = 1;
    batch.push_back(std::move(e));
  }
  return batch;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SINK_URL [batches=50] [batch=1000] [payload_bytes=200]\n",
                 argv[0]);
    return 2;
  }
  const std::string url = argv[1];
  const std::size_t batches = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 50;
  const std::size_t batch_size = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 1000;
  const std::size_t payload_bytes = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 200;
  try {
    auto sink = open(url);
    std::vector<std::vector<outpost::StoredEvent>> all;
    for (std::size_t b = 0; b < batches; ++b)
      all.push_back(make_batch(b * batch_size, batch_size, payload_bytes));
    // One warm-up batch (connections, metadata, topic/stream creation), not timed.
    auto warm = make_batch(0, batch_size, payload_bytes);
    sink->deliver(warm);

    std::vector<double> call_ms;
    std::size_t ok = 0, failed = 0;
    std::string first_error;
    const auto start = SteadyClock::now();
    for (const auto& batch : all) {
      const auto t = SteadyClock::now();
      const auto results = sink->deliver(batch);
      call_ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t).count());
      for (const auto& r : results) {
        if (r.ok()) {
          ++ok;
        } else {
          ++failed;
          if (first_error.empty()) first_error = r.error;
        }
      }
    }
    const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
    sink->close();
    std::sort(call_ms.begin(), call_ms.end());
    std::printf(
        "%s: %zu x %zu events, delivered %zu, failed %zu: %.0f events/s; deliver() p50 %.2f ms, "
        "max %.2f ms\n",
        std::string(sink->name()).c_str(), batches, batch_size, ok, failed,
        seconds > 0 ? static_cast<double>(ok) / seconds : 0.0, call_ms[call_ms.size() / 2],
        call_ms.back());
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
