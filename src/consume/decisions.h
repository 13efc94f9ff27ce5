#pragma once
// The consumer's pure decisions, as src/relay/batch.* are the relay's (no database, no source,
// no threads: unit-tested on their own, tests/unit/consumer_decisions_test.cpp); consumer.cpp runs
// the transactions around them (docs/consumers.md, "Failure classes", "Consumer dead letters"):
//   inbox_ids() / sort_out(): what the inbox is asked about, and which messages of an attempt are
//                parked at once (not an event; held behind a parked key of an ordered group),
//                skipped as duplicates, or handed to the handler;
//   judge():     the handler's verdicts on the handed messages become attempts counted, dead
//                letters, retries (in log order) and inbox ids to forget;
//   DestinationPause: the wait between probes of a destination that is down or busy.

#include <chrono>
#include <cstddef>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "outpost/consumer.h"

namespace outpost::consume {

// The ids the inbox records for msgs[idx...] (messages that are events with an id), and the
// message index of each.
struct InboxIds {
  std::vector<EventId> ids;
  std::vector<std::size_t> index;
};
InboxIds inbox_ids(std::span<const Message> msgs, std::span<const std::size_t> idx);

struct Sorted {
  std::vector<std::pair<std::size_t, std::string>> park;  // at once, with the reason
  std::set<std::size_t> duplicates;                       // the inbox has them already
  std::vector<std::size_t> work;                          // for the handler, in log order
};
// Sorts msgs[idx...] in log order. `fresh` is the inbox's answer for `ids` (InboxIds). With
// `ordered`, a message whose key is in `held` (keys with a parked message) is parked behind it,
// and every key parked here is added to `held`.
Sorted sort_out(std::span<const Message> msgs, std::span<const std::size_t> idx,
                const InboxIds& ids, const std::vector<bool>& fresh, bool ordered,
                std::set<std::string>& held);

struct Judgement {
  struct Failed {
    std::size_t index;
    int attempt;  // the attempts of msgs[index] counted so far, this one included
    std::string why;
  };
  std::vector<Failed> failed;                             // refused: attempts counted
  std::vector<std::pair<std::size_t, std::string>> park;  // failed max_attempts times
  std::vector<std::size_t> retry;  // failed or unavailable: tried again, in log order
  std::vector<EventId> forget;     // their inbox ids, recorded by this attempt
  std::set<std::size_t> down;      // the destination was unavailable for these (no attempt)
  std::string why;                 // the first unavailable reason
  Duration retry_after{0};         // the longest Retry-After asked for
  bool answered = false;           // the destination handled or refused one message or more
  std::size_t handled = 0;         // handed messages that neither failed nor met an outage
};
// The handler's verdicts on msgs[work...] (batch.failures() and batch.unavailable(), indexes
// into `work`; out-of-range and repeated ones ignored, unavailable winning over failed).
// Counts an attempt in `attempts` for each failed message.
Judgement judge(std::span<const Message> msgs, std::span<const std::size_t> work,
                const std::vector<std::pair<std::size_t, std::string>>& failures,
                const std::vector<ConsumerBatch::Unavailable>& unavailable,
                std::vector<int>& attempts, int max_attempts);

// The pause of an unavailable destination, the relay's numbers (docs/relay.md, "Pauses"): the
// first probe after 500 ms, then doubling up to 30 s, or backoff_max when that is smaller (but
// not below 10 ms); Retry-After honoured within that cap; up to 10% jitter, so that consumers
// paused by one outage do not probe in lockstep. The consumer waits and probes; this decides.
class DestinationPause {
 public:
  using SteadyClock = std::chrono::steady_clock;
  explicit DestinationPause(Duration backoff_max) : backoff_max_(backoff_max) {}

  // A message found the destination down or busy: pause, or stay paused with the next probe
  // further off. Returns the notice to give when the pause begins (nullopt while it lasts).
  std::optional<std::string> unavailable(const std::string& why, Duration retry_after);
  // The destination answered (handled or refused a message): returns the notice when that ends
  // a pause.
  std::optional<std::string> answered();

  bool down() const { return down_; }
  Duration wait() const { return wait_; }  // before the next probe
  Duration probe_cap() const;
  const std::string& why() const { return why_; }
  void count_probe() { ++probes_; }

 private:
  Duration backoff_max_;
  bool down_ = false;
  SteadyClock::time_point since_{};
  Duration step_{0}, wait_{0};
  int probes_ = 0;
  std::string why_;
};

}  // namespace outpost::consume
