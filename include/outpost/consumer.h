#pragma once
// Checkpointed stream consumers (docs/consumers.md): a consumer reads a batch from a log,
// calls your handler with the batch and an OPEN TRANSACTION on the checkpoint store, and commits
// your state, the inbox rows of the batch and the new checkpoint in that one transaction. A crash
// before the commit replays the batch; a message sent twice is skipped by its event id.
//
//   auto store = outpost::open_checkpoint_store("sqlite:state.db");
//   auto source = outpost::open_source("file:events.jsonl");
//   outpost::Consumer consumer(*source, *store, {.group = "totals"});
//   consumer.run([](outpost::ConsumerBatch& batch) {
//     for (std::size_t i = 0; i < batch.size(); ++i) {
//       // ... UPDATE totals ... on batch.tx() (TxHandle::sqlite / ::postgres of the store)
//       // batch.fail(i, "why") for a message that cannot be handled now
//     }
//   });
//
// Failures (consumer dead letters): a message whose handling fails (fail(i), or the handler
// throws) is retried with full-jitter backoff up to max_attempts, each attempt in its own
// transaction; then it is parked in `<prefix>_dead` with its error, attempts, source position
// and payload, and the consumer moves on. Ordered (default): later messages of a parked key are
// parked behind it until an operator retries or discards it; unordered: they flow on. A message
// that is not an outpost event (a torn or foreign line) is parked at once. Parked messages'
// ids stay in the inbox, so a later duplicate of one is skipped, not handled around it.
// Operators list, retry and discard them (CheckpointStore below, `outpost consumers`). Retry
// attempt counts live in memory: a restart begins counting again.
//
// Outages are not failures: a destination that is down (batch.unavailable(i), UnavailableError)
// pauses the consumer without counting attempts, and a log or checkpoint store that fails
// (a connection lost, a disk full, a lock held) is retried with backoff, never fatal (without
// until_idle). docs/consumers.md, "Failure classes".
//
// Thread safety: a Consumer runs on one thread; stop() may be called from any thread. A
// CheckpointStore object is used by one thread at a time (one connection).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "outpost/checkpoint_store.h"
#include "outpost/event.h"
#include "outpost/relay.h"
#include "outpost/source.h"
#include "outpost/tx.h"

namespace outpost {

// One attempt at a batch, as the handler sees it.
class ConsumerBatch {
 public:
  ConsumerBatch(std::span<const Message> messages, TxHandle tx, int attempt,
                std::size_t duplicates = 0)
      : messages_(messages), tx_(tx), attempt_(attempt), duplicates_(duplicates) {}
  std::size_t size() const { return messages_.size(); }
  const Message& operator[](std::size_t i) const { return messages_[i]; }
  std::span<const Message> messages() const { return messages_; }
  // The open transaction on the checkpoint store: write your state here.
  TxHandle tx() const { return tx_; }
  // 1 for the first try of these messages.
  int attempt() const { return attempt_; }
  // Messages of this read that the inbox skipped as already handled (they are not in the batch;
  // a batch of nothing but duplicates still reaches the handler, with size() 0), so a count of
  // them can commit with the batch.
  std::size_t duplicates() const { return duplicates_; }
  // Message i could not be handled: it is retried (and eventually parked); the others commit.
  // Do not apply later messages of the same key after failing one (fail them too), or per-key
  // order is lost.
  void fail(std::size_t i, std::string error) { failures_.emplace_back(i, std::move(error)); }
  const std::vector<std::pair<std::size_t, std::string>>& failures() const { return failures_; }
  // Message i was not handled because its destination is down or busy, not refusing it (a
  // sink's DeliveryResult::unavailable; throwing UnavailableError says the same for the whole
  // batch). No attempt is counted and nothing is parked: the consumer pauses, waits (at least
  // `retry_after`), probes with one message and resumes once that one is handled
  // (docs/consumers.md, "Failure classes"). The others commit, as with fail().
  void unavailable(std::size_t i, std::string why, Duration retry_after = Duration{0}) {
    unavailable_.push_back({i, std::move(why), retry_after});
  }
  struct Unavailable {
    std::size_t index;
    std::string why;
    Duration retry_after;
  };
  const std::vector<Unavailable>& unavailable() const { return unavailable_; }

 private:
  std::span<const Message> messages_;
  TxHandle tx_;
  int attempt_;
  std::size_t duplicates_;
  std::vector<std::pair<std::size_t, std::string>> failures_;
  std::vector<Unavailable> unavailable_;
};

using ConsumerHandler = std::function<void(ConsumerBatch& batch)>;

struct ConsumerOptions {
  std::string group;  // required: names the checkpoint, the inbox consumer and dead letters
  std::size_t batch_size = 100;  // messages per read and transaction (>= 1)
  // Refused handling (fail(), an ordinary exception): tries before parking, the first included
  // (>= 1), with full-jitter backoff between them. The relay's schedule (RelayOptions), so a
  // consumer's retries span hours as the relay's do; a message being retried holds the group
  // (docs/consumers.md, "Failure classes"). A destination that is unavailable spends none.
  int max_attempts = RelayOptions{}.max_attempts;
  Duration backoff_base = RelayOptions{}.backoff_base;  // first retry waits up to this
  Duration backoff_max = RelayOptions{}.backoff_max;    // cap on any retry delay and probe wait
  bool ordered = true;  // later messages of a parked key are parked behind it
  Duration poll{500};   // longest wait for new messages per read
  // > 0: run() returns once no message came for this long (and no retry is pending). Failed
  // reads and commits (outages) do not count as progress: when the last attempt failed and no
  // message came for this long, run() throws that error instead of retrying on.
  Duration until_idle{0};
  Duration inbox_retention = std::chrono::hours(24 * 7);  // inbox ids older than this are purged
  // Errors the consumer survives (source/store outages; it backs off and retries) and failed
  // handling attempts. Must not throw.
  std::function<void(const std::string&)> on_error;
  // Transitions an operator should see once, not per message (warning: something is wrong now
  // or may have cost messages): a log rotation followed, a log truncated in place (warning);
  // the destination down (warning) and back; the log or checkpoint store failing (warning) and
  // working again. Must not throw. Called on the thread of run() or run_once(): what the source
  // says while it reads ahead on another thread is said there after that read.
  std::function<void(const std::string&, bool warning)> on_notice;
  // An operator moved the group (`outpost consumers seek`, CheckpointStore::seek) to
  // `position`; the consumer reads on from there. What a handler remembers of messages it saw
  // (ids it delivered) no longer says what comes next: with --reprocess they come again. Called
  // on the consumer's thread, between batches. Must not throw.
  std::function<void(const std::string& position)> on_moved;
  // Test hook: called just before each commit that carries handler effects.
  std::function<void()> before_commit;
};

struct ConsumerCounters {
  std::uint64_t batches = 0;     // committed batches
  std::uint64_t read = 0;        // messages read from the source
  std::uint64_t handled = 0;     // messages whose effects committed
  std::uint64_t duplicates = 0;  // skipped by the inbox
  std::uint64_t failures = 0;    // failed handling attempts
  std::uint64_t parked = 0;      // moved to dead letters
  std::uint64_t retried = 0;     // dead letters handled after an operator's retry
  std::uint64_t errors = 0;      // source/store errors survived
  // Messages whose destination was unavailable (not attempts), and the pauses that began.
  std::uint64_t unavailable = 0;
  std::uint64_t pauses = 0;
  bool paused = false;  // the destination is down now: waiting to probe it
};

class Consumer {
 public:
  // `source` and `store` must outlive the consumer. Throws ConfigError for bad options.
  Consumer(Source& source, CheckpointStore& store, ConsumerOptions options);
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // Loads the group's checkpoint (a group is bound to the source URL it first read: another URL
  // is a ConfigError) and consumes until stop() or until_idle. The batch in flight when stop()
  // is called is finished (committed) first. With a source that can_read_ahead(), the next batch
  // is read on a second thread while one commits (a batch read ahead and not handled when run()
  // returns is dropped, and read again from the checkpoint).
  void run(const ConsumerHandler& handler);
  // One read + handle + commit. Returns the number of messages read (0: nothing new).
  std::size_t run_once(const ConsumerHandler& handler);
  void stop();
  ConsumerCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outpost
