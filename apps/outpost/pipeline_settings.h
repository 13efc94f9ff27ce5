#pragma once
// The settings of a pipeline, written once: each row is a flag of `outpost relay` / `outpost
// consume` (--KEY with '-' for '_'), a key of the config file's [[relay]] / [[consume]] table
// (KEY), with its help text, limits and default (the struct's initialiser), and a field that
// decides whether a reload changed the pipeline. pipeline_flags.h makes the flags from it,
// config.cpp reads the keys with it (docs/configuration.md; docs/operations.md, "Keys").

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config.h"
#include "pipeline_limits.h"

namespace outpost::cli {

template <class C>
struct Setting {
  std::string_view key;   // the config key; the flag is --key with '-' for '_'
  std::string_view help;  // the flag's help
  std::variant<std::string C::*, bool C::*, std::size_t C::*, std::int64_t C::*, int C::*> field;
  std::int64_t min = 0, max = 0;  // integers: the accepted range, for the flag and the key alike
  bool required = false;          // strings: the flag and the key must be given
  std::string_view env{};         // strings: the flag's environment variable ("": none)
  std::string_view choices{};     // strings: the values accepted, '|' between them ("": any)

  // The values `choices` accepts, one an element (empty: any).
  std::vector<std::string> choice_list() const {
    std::vector<std::string> out;
    for (std::string_view rest = choices; !rest.empty();) {
      auto bar = rest.find('|');
      out.emplace_back(rest.substr(0, bar));
      rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 1);
    }
    return out;
  }
  std::string flag() const {
    std::string f = "--" + std::string(key);
    for (char& c : f)
      if (c == '_') c = '-';
    return f;
  }
};

// The flags of `outpost relay` and the keys of [[relay]] (name, which only the config file has,
// and --metrics / --log-format, which the daemon has once for every pipeline, are not rows).
inline const std::vector<Setting<PipelineConfig>>& relay_settings() {
  using C = PipelineConfig;
  static const std::vector<Setting<C>> rows = {
      {"store", "Store URL", &C::store, 0, 0, true, "OUTPOST_STORE"},
      {"sink", "Sink URL (file:PATH, http(s)://..., kafka://..., ...)", &C::sink, 0, 0, true,
       "OUTPOST_SINK"},
      {"batch", "Events per claim", &C::batch, 1, limits::kMaxBatch},
      {"lease_ms", "Lease per claim in ms (renewed every lease/3)", &C::lease_ms,
       limits::kMinLeaseMs, limits::kMaxMs},
      {"max_attempts",
       "Deliveries the destination refused before dead-lettering, the first included (an "
       "unavailable destination pauses the relay and spends none)",
       &C::max_attempts, 1, limits::kMaxAttempts},
      {"backoff_base_ms", "First retry delay cap in ms", &C::backoff_base_ms, 0, limits::kMaxMs},
      {"backoff_max_ms", "Largest retry delay in ms", &C::backoff_max_ms, 0, limits::kMaxMs},
      {"max_crashes",
       "Claims of an event whose lease expired unsettled (the relay died or hung delivering it) "
       "before dead-lettering it unseen",
       &C::max_crashes, 1, limits::kMaxAttempts},
      {"concurrency", "Parallel deliveries in the sink (per-key order kept)", &C::concurrency, 1,
       limits::kMaxConcurrency},
      {"deliver_timeout_ms",
       "Deadline of one batch's delivery: past it, events in flight fail (timed out) and the "
       "rest is released (0: the lease)",
       &C::deliver_timeout_ms, 0, limits::kMaxMs},
      {"drain_timeout_ms",
       "On SIGTERM/SIGINT, give deliveries in flight at most this long, then release them (0: "
       "one sink timeout)",
       &C::drain_timeout_ms, 0, limits::kMaxMs},
      {"unordered", "No per-key order (higher throughput)", &C::unordered},
      {"on_dead",
       "A dead letter's key: continue (its later events flow on) or hold (they wait until it "
       "is retried, then delivered first, or discarded)",
       &C::on_dead, 0, 0, false, "", "continue|hold"},
      {"until_empty", "Exit when nothing is pending or leased", &C::until_empty},
      {"quiet", "Do not print delivery errors", &C::quiet},
  };
  return rows;
}

// The flags of `outpost consume` and the keys of [[consume]] (name aside, as for the relay).
inline const std::vector<Setting<ConsumeArgs>>& consume_settings() {
  using C = ConsumeArgs;
  static const std::vector<Setting<C>> rows = {
      {"from", "Log URL (file:PATH, redis-stream://..., kafka://...?group=G, nats://...?stream=S)",
       &C::from, 0, 0, true},
      {"group", "Consumer group name (checkpoint, inbox, dead letters)", &C::group, 0, 0, true},
      {"checkpoint", "Checkpoint store URL (sqlite:PATH or postgresql://...)", &C::checkpoint, 0, 0,
       true},
      {"sink", "Sink URL (file:PATH, http(s)://..., kafka://..., ...)", &C::sink, 0, 0, true},
      {"batch", "Messages per read and transaction", &C::batch, 1, limits::kMaxBatch},
      {"max_attempts", "Attempts before a message is parked, the first included", &C::max_attempts,
       1, limits::kMaxAttempts},
      {"backoff_base_ms", "First retry delay cap in ms", &C::backoff_base_ms, 0, limits::kMaxMs},
      {"backoff_max_ms", "Largest retry delay in ms", &C::backoff_max_ms, 0, limits::kMaxMs},
      {"until_idle", "Exit once no message came for MS milliseconds (0: run until a signal)",
       &C::until_idle_ms, 0, limits::kMaxMs},
      {"unordered", "Later messages of a parked key flow on (default: parked behind it)",
       &C::unordered},
      {"quiet", "Do not print delivery errors", &C::quiet},
  };
  return rows;
}

// Whether `a` and `b` agree on every setting of `rows` (a reload restarts a pipeline that does
// not).
template <class C>
bool same_settings(const C& a, const C& b, const std::vector<Setting<C>>& rows) {
  for (const auto& s : rows)
    if (!std::visit([&](auto field) { return a.*field == b.*field; }, s.field)) return false;
  return true;
}

}  // namespace outpost::cli
