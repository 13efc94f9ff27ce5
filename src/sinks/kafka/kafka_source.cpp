// The Kafka source (`kafka://host:port[,host:port]/TOPIC?group=G`, librdkafka): the messages the
// Kafka sink produced (key = event key, value = payload, CloudEvents headers with ce-id /
// outpost-id = event id). The position is the next offset of each partition this process has
// read, "PARTITION:OFFSET,..."; several processes may share the Kafka group (G), each committing
// its own partitions, merged into the stored checkpoint (merge()). Offsets live only in the
// checkpoint table: nothing is committed to Kafka (enable.auto.commit=false), and on every
// assignment (start, rebalance) the assigned partitions are sought to the stored offsets.
// A topic deleted and re-created restarts its offsets at 0: a stored offset past a partition's
// end at an assignment stops the consumer with an error naming the group and the way out, never
// a silent skip (docs/consumers.md, "A log deleted and re-created").

#include <librdkafka/rdkafka.h>

#include <charconv>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "consume/message.h"
#include "consume/sources.h"
#include "outpost/error.h"

namespace outpost::consume {
namespace {

using Offsets = std::map<std::int32_t, std::int64_t>;  // partition -> next offset

// "PARTITION:OFFSET,..." appended to `out` (once per message: no temporaries).
void append_offsets(std::string& out, const Offsets& o) {
  char num[24];
  bool first = true;
  for (auto& [p, off] : o) {
    if (!first) out += ',';
    first = false;
    out.append(num, std::to_chars(num, num + sizeof num, p).ptr);
    out += ':';
    out.append(num, std::to_chars(num, num + sizeof num, off).ptr);
  }
}

std::string format_offsets(const Offsets& o) {
  std::string out;
  append_offsets(out, o);
  return out;
}

Offsets parse_offsets(const std::string& text) {
  Offsets o;
  std::size_t at = 0;
  while (at < text.size()) {
    auto comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    auto colon = item.find(':');
    std::int32_t p = -1;
    std::int64_t off = -1;
    if (colon == std::string::npos ||
        std::from_chars(item.data(), item.data() + colon, p).ec != std::errc() ||
        std::from_chars(item.data() + colon + 1, item.data() + item.size(), off).ec !=
            std::errc() ||
        p < 0 || off < 0)
      throw ConfigError("kafka source: checkpoint '" + text + "' is not PARTITION:OFFSET,...");
    o[p] = off;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return o;
}

struct Config {
  std::string brokers, topic, group, where;
  // true (assign=manual): this process takes every partition itself, no group membership; a
  // restarted process reads on at once instead of waiting for the killed member's session to
  // time out. For one process per group.
  bool manual = false;
  std::vector<std::pair<std::string, std::string>> props;
  Duration timeout{10'000};
};

struct KafkaDeleter {
  void operator()(rd_kafka_t* rk) const noexcept {
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
  }
};

class KafkaSource final : public Source {
 public:
  explicit KafkaSource(Config c) : c_(std::move(c)) {}
  // Closing the group member runs the revoke callback, which uses the members below: close it
  // while they still exist.
  ~KafkaSource() override {
    rk_.reset();
    meta_.reset();
  }

  std::string_view name() const override { return "kafka"; }
  std::string url() const override { return c_.where; }
  bool partitioned() const override { return true; }
  void set_group(const std::string& group) override { group_ = group; }

  // The log is the topic: the bootstrap brokers (any of one cluster), the Kafka group, assign
  // and librdkafka properties may differ (a moved broker, another process's spelling).
  bool same_log(const std::string& stored_url) const override {
    if (stored_url == c_.where) return true;
    try {
      auto u = core::Url::parse(stored_url);
      return u.scheme() == "kafka" && u.path() == c_.topic;
    } catch (const Error&) {
      return false;
    }
  }
  // assign=manual only: group membership runs the rebalance callback inside read(), and that
  // reads the checkpoint table on the consumer's connection.
  bool can_read_ahead() const override { return c_.manual; }

  std::string merge(const std::string& stored, const std::string& mine) const override {
    Offsets all = stored.empty() ? Offsets{} : parse_offsets(stored);
    for (auto& [p, off] : parse_offsets(mine)) all[p] = off;
    return format_offsets(all);
  }

  // At start the next assignment seeks to `position`. Later (the consumer re-seeks after an
  // error, e.g. a failed commit) the partitions this process reads go back to it now, dropping
  // what librdkafka prefetched past it: else the batch that did not commit would be skipped.
  // When that fails the handle restarts (the next read assigns afresh).
  void seek(const std::string& position) override {
    stored_ = parse_offsets(position);
    if (!rk_ || assigned_.empty()) return;
    rd_kafka_topic_partition_list_t* parts =
        rd_kafka_topic_partition_list_new(static_cast<int>(assigned_.size()));
    for (std::int32_t p : assigned_) {
      auto it = stored_.find(p);
      rd_kafka_topic_partition_list_add(parts, c_.topic.c_str(), p)->offset =
          it == stored_.end() ? RD_KAFKA_OFFSET_BEGINNING : it->second;
      if (it == stored_.end())
        next_.erase(p);
      else
        next_[p] = it->second;
    }
    rd_kafka_error_t* err =
        rd_kafka_seek_partitions(rk_.get(), parts, static_cast<int>(c_.timeout.count()));
    bool failed = err != nullptr;
    if (err) rd_kafka_error_destroy(err);
    for (int i = 0; !failed && i < parts->cnt; ++i) failed = parts->elems[i].err != 0;
    rd_kafka_topic_partition_list_destroy(parts);
    if (failed) {
      rk_.reset();
      assigned_.clear();
      next_.clear();
    }
  }
  void set_checkpoint_reader(std::function<std::string()> reader) override {
    reader_ = std::move(reader);
  }

  std::vector<Message> read(std::size_t max, Duration wait) override {
    if (!rk_) rk_ = start(!c_.manual);
    if (c_.manual && assigned_.empty() && !assign_all()) {
      if (!past_end_.empty())
        throw Error(ErrorCode::corrupt, "kafka", std::exchange(past_end_, std::string()));
      std::this_thread::sleep_for(std::min<Duration>(wait, Duration(100)));  // no topic yet
      return {};
    }
    std::vector<Message> out;
    out.reserve(std::min<std::size_t>(max, 1024));
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (out.size() < max) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      int ms = out.empty() ? static_cast<int>(std::max<std::int64_t>(left.count(), 0)) : 0;
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_.get(), ms);
      if (!past_end_.empty()) {
        if (m) rd_kafka_message_destroy(m);
        throw Error(ErrorCode::corrupt, "kafka", std::exchange(past_end_, std::string()));
      }
      if (!callback_error_.empty()) {
        std::string e = std::move(callback_error_);
        callback_error_.clear();
        if (m) rd_kafka_message_destroy(m);
        throw ConnectionError("kafka", c_.where + ": " + e);
      }
      if (!m) {
        if (!out.empty() || std::chrono::steady_clock::now() >= deadline) break;
        continue;
      }
      std::unique_ptr<rd_kafka_message_t, void (*)(rd_kafka_message_t*)> owned(
          m, rd_kafka_message_destroy);
      if (m->err) continue;  // partition EOF, unknown topic while it is created: librdkafka retries
      if (!assigned_.count(m->partition)) continue;  // from before a revoke
      next_[m->partition] = m->offset + 1;
      out.push_back(to_message(m));
    }
    return out;
  }

  std::optional<std::int64_t> lag(const std::string& position) override {
    if (!meta_) meta_ = start(false);
    Offsets at = parse_offsets(position);
    rd_kafka_topic_t* t = rd_kafka_topic_new(meta_.get(), c_.topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    auto err = rd_kafka_metadata(meta_.get(), 0, t, &md, static_cast<int>(c_.timeout.count()));
    rd_kafka_topic_destroy(t);
    if (err) return std::nullopt;
    std::int64_t lag = 0;
    bool ok = md->topic_cnt == 1 && !md->topics[0].err;
    for (int i = 0; ok && i < md->topics[0].partition_cnt; ++i) {
      std::int32_t p = md->topics[0].partitions[i].id;
      std::int64_t low = 0, high = 0;
      if (rd_kafka_query_watermark_offsets(meta_.get(), c_.topic.c_str(), p, &low, &high,
                                           static_cast<int>(c_.timeout.count())))
        ok = false;
      auto it = at.find(p);
      if (ok && it != at.end() && it->second > high) {
        // Not 0: the messages the group will read are not the ones after its checkpoint.
        rd_kafka_metadata_destroy(md);
        throw Error(ErrorCode::corrupt, "kafka", past_end(p, it->second, high));
      }
      lag += high - (it == at.end() ? low : std::max(it->second, low));
    }
    rd_kafka_metadata_destroy(md);
    return ok ? std::optional<std::int64_t>(lag) : std::nullopt;
  }

  // Offsets of every partition of the topic: the low watermarks (beginning), the high ones
  // (end), or the first offset whose timestamp is at or after a time (Kafka's ListOffsets, the
  // broker's or the producer's timestamp as the topic keeps them; the high watermark where none
  // is that late). A position is checked against the high watermarks: one past a partition's
  // end would skip what is written there until it gets that far (docs/consumers.md, "Moving and
  // deleting a group").
  std::string position_for(const SeekTarget& t) override {
    Offsets given;
    if (t.kind == SeekTarget::Kind::position) given = parse_offsets(t.position);  // names it
    if (!meta_) meta_ = start(false);
    const int timeout = static_cast<int>(c_.timeout.count());
    rd_kafka_topic_t* topic = rd_kafka_topic_new(meta_.get(), c_.topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    auto err = rd_kafka_metadata(meta_.get(), 0, topic, &md, timeout);
    rd_kafka_topic_destroy(topic);
    if (err)
      throw ConnectionError(
          "kafka", "kafka source: metadata of topic '" + c_.topic + "': " + rd_kafka_err2str(err));
    std::vector<std::int32_t> partitions;
    bool ok = md->topic_cnt == 1 && !md->topics[0].err;
    for (int i = 0; ok && i < md->topics[0].partition_cnt; ++i)
      partitions.push_back(md->topics[0].partitions[i].id);
    rd_kafka_metadata_destroy(md);
    if (!ok || partitions.empty())
      throw Error(ErrorCode::not_found, "kafka", "topic '" + c_.topic + "' does not exist");
    Offsets out, ends;
    for (std::int32_t p : partitions) {
      std::int64_t low = 0, high = 0;
      if (auto e = rd_kafka_query_watermark_offsets(meta_.get(), c_.topic.c_str(), p, &low, &high,
                                                    timeout))
        throw ConnectionError("kafka", "kafka source: watermarks of partition " +
                                           std::to_string(p) + ": " + rd_kafka_err2str(e));
      out[p] = t.kind == SeekTarget::Kind::beginning ? low : high;
      ends[p] = high;
    }
    if (t.kind == SeekTarget::Kind::position) {
      for (const auto& [p, off] : given) {
        auto end = ends.find(p);
        if (end == ends.end() || off > end->second)
          throw ConfigError("kafka source: position '" + t.position +
                            "' is past the end of topic '" + c_.topic + "': " +
                            (end == ends.end()
                                 ? "it has no partition " + std::to_string(p)
                                 : "partition " + std::to_string(p) + " ends at offset " +
                                       std::to_string(end->second)) +
                            " (its end: " + format_offsets(ends) + ")");
      }
      return t.position;
    }
    if (t.kind == SeekTarget::Kind::time) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time.time_since_epoch());
      rd_kafka_topic_partition_list_t* parts =
          rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size()));
      for (std::int32_t p : partitions)
        rd_kafka_topic_partition_list_add(parts, c_.topic.c_str(), p)->offset = ms.count();
      auto e = rd_kafka_offsets_for_times(meta_.get(), parts, timeout);
      std::string why = e ? rd_kafka_err2str(e) : "";
      for (int i = 0; why.empty() && i < parts->cnt; ++i) {
        const auto& tp = parts->elems[i];
        if (tp.err)
          why = "partition " + std::to_string(tp.partition) + ": " + rd_kafka_err2str(tp.err);
        else if (tp.offset >= 0)
          out[tp.partition] = tp.offset;  // else none that late: the end
      }
      rd_kafka_topic_partition_list_destroy(parts);
      if (!why.empty()) throw ConnectionError("kafka", "kafka source: offsets for time: " + why);
    }
    return format_offsets(out);
  }

 private:
  // A stored offset past partition `p`'s end (`high`): the topic was deleted and re-created (its
  // offsets restarted at 0) or lost its tail, and reading on would skip up to the offset.
  std::string past_end(std::int32_t p, std::int64_t offset, std::int64_t high) const {
    const std::string group = group_.empty() ? "GROUP" : group_;
    return "the checkpoint of " + (group_.empty() ? "the group" : "group '" + group_ + "'") +
           " (offset " + std::to_string(offset) + " of partition " + std::to_string(p) +
           ") is past the end of topic '" + c_.topic + "' on " + c_.where + " (partition " +
           std::to_string(p) + " ends at offset " + std::to_string(high) +
           "): the topic was deleted and re-created, or lost messages, since the group read it, "
           "and reading on would skip its messages up to offset " +
           std::to_string(offset) +
           " in silence. Move the group: `outpost consumers seek --group " + group +
           " --to beginning` reads the topic as it is now from its start, `--to end` " +
           "skips what it holds (docs/consumers.md, \"A log deleted and re-created\")";
  }

  // Checked at each assignment: a stored offset past the end of its partition (past_end()).
  // Where the watermarks cannot be read now nothing is said (the next assignment checks again).
  bool check_ends(rd_kafka_t* rk, const rd_kafka_topic_partition_list_t* parts) {
    for (int i = 0; i < parts->cnt; ++i) {
      const auto& tp = parts->elems[i];
      if (tp.offset < 0) continue;  // no stored offset: the beginning
      std::int64_t low = 0, high = 0;
      if (rd_kafka_query_watermark_offsets(rk, c_.topic.c_str(), tp.partition, &low, &high,
                                           static_cast<int>(c_.timeout.count())))
        continue;
      if (tp.offset > high) {
        past_end_ = past_end(tp.partition, tp.offset, high);
        return false;
      }
    }
    return true;
  }

  Message to_message(const rd_kafka_message_t* m) {
    Message msg;
    if (m->payload) msg.event.payload.assign(static_cast<const char*>(m->payload), m->len);
    rd_kafka_headers_t* hdrs = nullptr;
    std::string id_text;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* name;
      const void* value;
      size_t size;
      for (size_t i = 0; !rd_kafka_header_get_all(hdrs, i, &name, &value, &size); ++i)
        apply_cloudevents_header(
            msg, name,
            value ? std::string_view(static_cast<const char*>(value), size) : std::string_view(),
            id_text);
    }
    // The message key is the event key (ce-partitionkey carries the same).
    if (m->key) msg.event.key.assign(static_cast<const char*>(m->key), m->key_len);
    msg.position = position();
    finish_cloudevents_message(msg, id_text, [m] {
      return "partition " + std::to_string(m->partition) + " offset " + std::to_string(m->offset);
    });
    return msg;
  }

  // format_offsets(next_), in a reused buffer: one allocation per message, the copy.
  std::string position() {
    position_.clear();
    append_offsets(position_, next_);
    return position_;
  }

  using Handle = std::unique_ptr<rd_kafka_t, KafkaDeleter>;

  // assign=manual: every partition of the topic, at the stored offsets. False while the topic
  // does not exist yet.
  bool assign_all() {
    rd_kafka_topic_t* t = rd_kafka_topic_new(rk_.get(), c_.topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    auto err = rd_kafka_metadata(rk_.get(), 0, t, &md, static_cast<int>(c_.timeout.count()));
    rd_kafka_topic_destroy(t);
    if (err) return false;
    bool ok = md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0;
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(1);
    for (int i = 0; ok && i < md->topics[0].partition_cnt; ++i)
      rd_kafka_topic_partition_list_add(parts, c_.topic.c_str(), md->topics[0].partitions[i].id);
    rd_kafka_metadata_destroy(md);
    if (ok) on_rebalance(rk_.get(), RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, parts, this);
    rd_kafka_topic_partition_list_destroy(parts);
    return ok && !assigned_.empty();
  }

  // Creates a consumer; `subscribe` joins the group (reading); lag() only needs metadata.
  Handle start(bool subscribe) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    auto set = [&](const std::string& k, const std::string& v) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        throw ConfigError("kafka source: property " + k + ": " + err, "kafka");
      }
    };
    set("bootstrap.servers", c_.brokers);
    set("group.id", c_.group);
    set("enable.auto.commit", "false");
    set("enable.auto.offset.store", "false");
    set("auto.offset.reset", "earliest");
    set("enable.partition.eof", "false");
    // The prefetch queue. Once it is full, librdkafka (< 2.2: no fetch.queue.backoff.ms) does
    // not fetch again for up to a second (librdkafka issue #2879), however fast we drain it:
    // a queue smaller than ~1 s of consumption starves a consumer with a backlog. At 8 MB
    // (~17,000 typical events, 0.1 s) a 120,000-event backlog was read at 48k events/s, at
    // 64 MB with the byte bound governing (queued.min.messages 100,000 would stop it first)
    // 116k. Memory stays bounded by it (RSS ~100 MB), not by the backlog.
    set("queued.max.messages.kbytes", "65536");
    set("queued.min.messages", "1000000");
    for (auto& [k, v] : c_.props) set(k, v);
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_rebalance_cb(conf, &KafkaSource::on_rebalance);
    rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) {
      rd_kafka_conf_destroy(conf);
      throw ConfigError(std::string("kafka source: ") + err, "kafka");
    }
    Handle handle(rk);
    if (!subscribe) return handle;
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t* topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, c_.topic.c_str(), RD_KAFKA_PARTITION_UA);
    auto e = rd_kafka_subscribe(rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (e) throw ConnectionError("kafka", c_.where + ": subscribe: " + rd_kafka_err2str(e));
    return handle;
  }

  // Assignment: seek each assigned partition to the group's committed offset (with a group,
  // read from the checkpoint table now, since another process may have moved it), or the
  // beginning.
  // No exception crosses this C callback.
  static void on_rebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t* parts, void* opaque) {
    auto* self = static_cast<KafkaSource*>(opaque);
    try {
      if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        // assign=manual (one process per group) assigns only from assign_all(): the checkpoint
        // seek() was given is the current one there, and read() may run on another thread than
        // the store's (can_read_ahead), so the reader is not called.
        Offsets stored =
            self->reader_ && !self->c_.manual ? parse_offsets(self->reader_()) : self->stored_;
        for (int i = 0; i < parts->cnt; ++i) {
          auto& tp = parts->elems[i];
          auto it = stored.find(tp.partition);
          tp.offset = it == stored.end() ? RD_KAFKA_OFFSET_BEGINNING : it->second;
        }
        if (!self->check_ends(rk, parts)) {
          rd_kafka_assign(rk, nullptr);  // read() throws past_end_
          return;
        }
        for (int i = 0; i < parts->cnt; ++i) {
          const auto& tp = parts->elems[i];
          self->assigned_.insert(tp.partition);
          if (tp.offset >= 0) self->next_[tp.partition] = tp.offset;
        }
        rd_kafka_assign(rk, parts);
      } else {
        for (int i = 0; i < parts->cnt; ++i) {
          self->assigned_.erase(parts->elems[i].partition);
          self->next_.erase(parts->elems[i].partition);
        }
        rd_kafka_assign(rk, nullptr);
      }
    } catch (const std::exception& e) {
      self->callback_error_ = std::string("rebalance: ") + e.what();
      rd_kafka_assign(rk, nullptr);
    }
  }

  Config c_;
  Handle rk_;       // the group member that reads
  Handle meta_;     // metadata and watermarks for lag()
  Offsets stored_;  // the checkpoint at seek()
  Offsets next_;    // next offset per partition read or assigned here
  std::set<std::int32_t> assigned_;
  std::function<std::string()> reader_;
  std::string callback_error_;  // set by on_rebalance, thrown by read()
  std::string past_end_;        // set by check_ends(), thrown by read() (not retried)
  std::string group_;           // set_group(): named in errors
  std::string position_;        // position()'s buffer
};

}  // namespace

std::unique_ptr<Source> open_kafka_source(std::string_view text) {
  auto url = core::Url::parse(text);
  Config c;
  c.where = url.redacted();
  auto bad = [&](const std::string& what) {
    return ConfigError("kafka source URL " + c.where + ": " + what, "kafka");
  };
  if (url.hosts().empty()) throw bad("at least one host:port expected");
  c.brokers = url.host_list(9092);
  c.topic = url.path();
  if (c.topic.empty()) throw bad("topic (the URL path) missing");
  if (c.topic.find('{') != std::string::npos)
    throw bad("a consumer reads one topic: '{type}' templates are for the sink");
  auto group = url.param("group");
  if (!group || group->empty()) throw bad("parameter 'group' (the Kafka consumer group) missing");
  c.group = *group;
  c.timeout = Duration{url.int_param("timeout_ms", 1, 3'600'000).value_or(10'000)};
  if (auto a = url.param("assign")) {
    if (*a != "group" && *a != "manual") throw bad("parameter 'assign' must be group or manual");
    c.manual = *a == "manual";
  }
  for (auto& [k, v] : url.query())
    if (k.find('.') != std::string::npos) {
      url.param(k);
      c.props.emplace_back(k, v);
    }
  url.reject_unknown();
  return std::make_unique<KafkaSource>(std::move(c));
}

}  // namespace outpost::consume
