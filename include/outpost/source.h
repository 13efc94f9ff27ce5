#pragma once
// The logs a consumer reads (include/outpost/consumer.h): a Source reads messages in log order
// from a position, and open_source() opens one by URL (file:, redis-stream://, kafka://, nats://;
// docs/consumers.md, "Sources"). Each is the other end of the sink of the same URL.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"

namespace outpost {

// One message read from a log.
struct Message {
  StoredEvent event;        // the decoded event; id nil when the message carried none
  std::string position;     // source position just after this message (the checkpoint value)
  std::string raw;          // the JSON line as read (file log); empty for broker messages
                            // (a dead letter stores their event's JSON encoding instead)
  std::string parse_error;  // not empty: not an outpost event; parked, never handed to you
};

// Where `outpost consumers seek` moves a group (docs/consumers.md, "Moving and deleting a group").
struct SeekTarget {
  enum class Kind { beginning, end, position, time } kind = Kind::beginning;
  std::string position;  // Kind::position: a position of the source, as its checkpoints are
  TimePoint time{};      // Kind::time: the first message at or after it is read next
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
  // are one log. The broker sources compare the log's identity (scheme, Redis db and stream,
  // NATS stream and subject, Kafka topic), not where the servers are or how the source is tuned,
  // so a group follows its log when the broker moves (docs/consumers.md, "Sources").
  virtual bool same_log(const std::string& stored_url) const { return stored_url == url(); }
  // The consumer group reading, for what the source says (a checkpoint past the log's end names
  // the group and the `outpost consumers seek` that gets out). Set before the first read.
  virtual void set_group(const std::string& /*group*/) {}
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
  // The position a group moved to `target` reads on from, in the log as it is now (its first
  // or last message, the message just before the first one at or after a time). Kind::position
  // is checked and returned as given. Throws ConfigError for a malformed position (naming it),
  // ConnectionError and the like when the log cannot be read. Default: "" (the beginning) for
  // Kind::beginning, ConfigError for the rest.
  virtual std::string position_for(const SeekTarget& target);
  // An operator moved `group` to `position`, or deleted it (nullopt): the registration
  // committed() keeps follows at once (Redis Streams: the group's field in
  // `<stream>:checkpoints`, set or deleted, so trimming neither removes what the group will
  // read again nor waits for a deleted group). Unlike committed(), throws when it fails.
  virtual void set_registration(const std::string& /*group*/,
                                const std::optional<std::string>& /*position*/) {}
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

}  // namespace outpost
