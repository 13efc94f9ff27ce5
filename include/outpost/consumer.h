#pragma once
// Checkpointed stream consumers (seed 001's unified log): a consumer reads a batch from a log,
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
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"
#include "outpost/relay.h"
#include "outpost/tx.h"

namespace outpost {

// One message read from a log.
struct Message {
  StoredEvent event;        // the decoded event; id nil when the message carried none
  std::string position;     // source position just after this message (the checkpoint value)
  std::string raw;          // the JSON line as read (file log); empty for broker messages
                            // (a dead letter stores their event's JSON encoding instead)
  std::string parse_error;  // not empty: not an outpost event; parked, never handed to you
};

// A log a consumer reads. Positions are opaque text (a byte offset, a stream id, offsets per
// partition); "" means the beginning.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::string_view name() const = 0;  // "file", "redis-stream", ...
  virtual std::string url() const = 0;        // as opened, password redacted
  // Whether `stored_url` (the URL a group was bound to) names this log. The file source
  // compares canonical paths: `file:log.jsonl` from its directory and `file:DIR/./log.jsonl`
  // are one log.
  virtual bool same_log(const std::string& stored_url) const { return stored_url == url(); }
  // Continue reading just after `position`.
  virtual void seek(const std::string& position) = 0;
  // Up to `max` messages in log order; waits up to `wait` when none is there yet. Throws on
  // errors that retrying will not fix (ConfigError); ConnectionError etc. are retried by run().
  virtual std::vector<Message> read(std::size_t max, Duration wait) = 0;
  // Messages in the log after `position` (nullopt when the source cannot tell).
  virtual std::optional<std::int64_t> lag(const std::string& position) = 0;
  // `position` is committed for `group` (Redis Streams mirrors it in `<stream>:checkpoints` so
  // the sink's trimming keeps what the group has not read). Must not throw.
  virtual void committed(const std::string& /*group*/, const std::string& /*position*/) {}
  // `group` is retired: drop any registration committed() made (or trimming stops at it).
  virtual void retire(const std::string& /*group*/) {}
  // True for sources whose consumer processes may share a group, each owning part of the log
  // (Kafka partitions): their position is merged into the stored one (merge()) instead of
  // replacing it.
  virtual bool partitioned() const { return false; }
  virtual std::string merge(const std::string& /*stored*/, const std::string& mine) const {
    return mine;
  }
  // True when read() may run on another thread than the consumer's while it commits the batch
  // before (Consumer::run then reads one batch ahead). The consumer still never calls two
  // methods at once, but read() must not call the checkpoint reader (the store is busy
  // committing), and committed() may come one batch late. False unless a source says so (file,
  // Redis Streams, NATS and Kafka with assign=manual do; Kafka in a group does not: its read runs
  // rebalance callbacks that read the checkpoint).
  virtual bool can_read_ahead() const { return false; }
  // Where the source can ask for the group's committed checkpoint again (Kafka: when partitions
  // are assigned after a rebalance). Called by the Consumer before the first read.
  virtual void set_checkpoint_reader(std::function<std::string()> /*reader*/) {}
  // Where the source says what an operator should see once (the file source: a log rotation
  // followed, a file truncated in place); `warning` for what may have cost messages. Set by the
  // Consumer before the first read; may be called from the read-ahead thread.
  virtual void set_notice(std::function<void(const std::string&, bool warning)> /*notice*/) {}
};

// file:PATH (the file sink's JSON lines, followed through log rotation; position =
// OFFSET@DEVICE:INODE:FINGERPRINT, the byte offset after the last whole line in that file).
// Throws ConfigError naming the bad part, or listing the schemes of this build.
std::unique_ptr<Source> open_source(std::string_view url);
std::vector<std::string> source_schemes();

// What an operator sees of a consumer group.
struct ConsumerGroupInfo {
  std::string group;
  std::string source;     // the URL it reads (redacted)
  std::string position;   // its committed checkpoint
  std::int64_t dead = 0;  // parked messages (including those waiting for a retry)
  TimePoint updated_at;
};

struct ConsumerDeadLetter {
  std::int64_t id = 0;  // row id (what retry/discard take, besides event ids)
  std::string group;
  std::string event_id;  // empty for a message without id
  std::string key;
  std::string position;  // source position just after the message
  int attempts = 0;
  std::string error;
  std::string payload;  // the message as read
  std::string state;    // "dead", or "retry" (an operator asked for another attempt)
  TimePoint dead_at;
};

// Where consumers keep their state, inbox, checkpoints and dead letters:
//   sqlite:PATH[?prefix=outpost_consumer&busy_timeout_ms=30000]
//   postgresql://user@host:port/db[?prefix=outpost_consumer&connect_timeout=…&sslmode=…]
// Tables <prefix>_checkpoints, <prefix>_dead and <prefix>_inbox are created on first use.
class CheckpointStore {
 public:
  struct Impl;
  explicit CheckpointStore(std::unique_ptr<Impl> impl);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  std::string url() const;  // redacted
  const std::string& prefix() const;
  // TxHandle::Kind::sqlite or ::postgres: what batch.tx() will be.
  TxHandle::Kind kind() const;

  std::vector<ConsumerGroupInfo> groups();
  std::optional<ConsumerGroupInfo> group(const std::string& group);
  std::vector<ConsumerDeadLetter> dead(const std::string& group, std::size_t limit);
  // `ids` are row ids or event ids. Retry: state -> "retry" (attempts reset); the running (or
  // next) consumer of the group handles them again, in row order, before reading on. Discard:
  // deleted. Both return how many rows they changed.
  std::size_t retry(const std::string& group, std::span<const std::string> ids);
  std::size_t retry_all(const std::string& group);
  std::size_t discard(const std::string& group, std::span<const std::string> ids);
  std::size_t discard_all(const std::string& group);

  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// What opening may do. create: make the database file and the tables when missing (consumers).
// existing: open only consumer state that is there (<prefix>_checkpoints and <prefix>_dead);
// none is ErrorCode::not_found naming the place, and nothing is created (not the SQLite file,
// not a table): `outpost consumers` inspects and edits with existing.
enum class CheckpointOpen { create, existing };

// Throws ConfigError for a malformed URL (naming the part) before connecting, ConnectionError
// when the database cannot be reached.
std::unique_ptr<CheckpointStore> open_checkpoint_store(
    std::string_view url, CheckpointOpen open = CheckpointOpen::create);
// Only the URL checks of open_checkpoint_store (for CLIs: validate everything before opening).
void validate_checkpoint_store_url(std::string_view url);

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
  // working again. Must not throw; may be called from the read-ahead thread.
  std::function<void(const std::string&, bool warning)> on_notice;
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
