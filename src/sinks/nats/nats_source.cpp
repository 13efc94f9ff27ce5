// The NATS JetStream source (`nats://host:port[,host:port]/SUBJECT?stream=NAME`, cnats): the
// messages the NATS sink published (payload as body, CloudEvents headers, Nats-Msg-Id = event
// id). The position is the stream sequence of the last message consumed. Reading is an
// ephemeral pull consumer with no acks, started at the checkpoint's next sequence: the
// checkpoint table is the only record of progress (nothing is acknowledged to the server), so
// a restarted or re-seeked source simply creates a new one. A SUBJECT with the sink's `{type}`
// template reads the subjects it renders to (`orders.{type}` -> `orders.>`), so one URL serves
// relay and consumer.
//
// A stream deleted and re-created restarts its sequences at 1: a checkpoint past the stream's
// last sequence (at every (re)subscription and, while idle, about once a second), or a stream
// created anew while this source read it, stops the consumer with an error naming the group
// and the way out, never a silent skip (docs/consumers.md, "A log deleted and re-created").

#include <nats/nats.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>

#include "consume/message.h"
#include "consume/sources.h"
#include "core/sink_batch.h"
#include "outpost/error.h"
#include "sinks/nats/nats_common.h"

namespace outpost::consume {
namespace {

using nats::JsDeleter;
using nats::status_text;
struct SubscriptionDeleter {
  void operator()(natsSubscription* s) const noexcept {
    natsSubscription_Unsubscribe(s);  // deletes the ephemeral consumer on the server now
    natsSubscription_Destroy(s);
  }
};
struct ConsumerInfoDeleter {
  void operator()(jsConsumerInfo* ci) const noexcept { jsConsumerInfo_Destroy(ci); }
};
struct StreamInfoDeleter {
  void operator()(jsStreamInfo* si) const noexcept { jsStreamInfo_Destroy(si); }
};
struct MetaDeleter {
  void operator()(jsMsgMetaData* m) const noexcept { jsMsgMetaData_Destroy(m); }
};
struct MsgListGuard {
  natsMsgList list{};
  ~MsgListGuard() { natsMsgList_Destroy(&list); }
};

struct Config : nats::Endpoint {
  std::string subject, stream;
  Duration timeout{10'000};
};

std::uint64_t parse_sequence(const std::string& text) {
  if (text.empty()) return 0;
  std::uint64_t seq = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seq);
  if (ec != std::errc() || end != text.data() + text.size())
    throw ConfigError("nats source: checkpoint '" + text + "' is not a stream sequence", "nats");
  return seq;
}

// The subjects a URL path reads: the sink's rule for the subjects a template covers (tail
// {type}: any depth).
std::string filter_subject(const std::string& path) {
  const bool tail = path.ends_with("{type}");
  return core::render_type_template(path, tail ? ">" : "*");
}

// An ephemeral, ack-less pull consumer of `c.stream` filtered to `c.subject`, from `start`.
void init_consumer_config(jsConsumerConfig& cc, const Config& c, std::uint64_t start) {
  jsConsumerConfig_Init(&cc);
  cc.AckPolicy = js_AckNone;
  cc.FilterSubject = c.subject.c_str();
  cc.DeliverPolicy = start > 1 ? js_DeliverByStartSequence : js_DeliverAll;
  if (start > 1) cc.OptStartSeq = start;
  // A killed process leaves its consumer behind; the server drops it after this long without
  // pull requests (a live source pulls at least every poll interval).
  cc.InactiveThreshold = std::int64_t{60} * 1'000'000'000;
}

class NatsSource final : public Source {
 public:
  explicit NatsSource(Config c) : c_(std::move(c)) {}
  ~NatsSource() override {
    sub_.reset();
    js_.reset();
    nc_.reset();
  }

  std::string_view name() const override { return "nats"; }
  std::string url() const override { return c_.where; }
  bool can_read_ahead() const override { return true; }
  void set_group(const std::string& group) override { group_ = group; }

  // The log is the stream and the subjects read from it: servers, credentials and tuning
  // parameters may differ (a moved server, the sink's own parameters).
  bool same_log(const std::string& stored_url) const override {
    if (stored_url == c_.where) return true;
    try {
      auto u = core::Url::parse(stored_url);
      auto stream = u.param("stream");
      return u.scheme() == "nats" && stream && *stream == c_.stream && !u.path().empty() &&
             filter_subject(u.path()) == c_.subject;
    } catch (const Error&) {
      return false;
    }
  }

  void seek(const std::string& position) override {
    next_ = parse_sequence(position) + 1;
    sub_.reset();
  }

  std::vector<Message> read(std::size_t max, Duration wait) override {
    if (!sub_) subscribe();
    MsgListGuard got;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = natsSubscription_Fetch(&got.list, sub_.get(), static_cast<int>(max),
                                          std::max<std::int64_t>(wait.count(), 1), &jerr);
    std::vector<Message> out;
    if (s == NATS_TIMEOUT && got.list.Count == 0) {
      // Idle: the stream may have been deleted and re-created under the pull consumer (which
      // then waits at a sequence the new stream may reach only much later).
      if (std::chrono::steady_clock::now() - checked_ >= std::chrono::seconds(1)) check_stream();
      return out;
    }
    if (s != NATS_OK && got.list.Count == 0) {
      // The consumer may be gone (server restart, inactivity): the next read makes a new one
      // at the same sequence.
      sub_.reset();
      throw ConnectionError("nats", c_.where + ": fetch: " + status_text(s));
    }
    out.reserve(static_cast<std::size_t>(got.list.Count));
    for (int i = 0; i < got.list.Count; ++i) {
      Message m = to_message(got.list.Msgs[i]);
      if (m.position.empty()) continue;  // not a stream message (a status reply)
      out.push_back(std::move(m));
    }
    return out;
  }

  std::optional<std::int64_t> lag(const std::string& position) override {
    // The messages matching the subject after `position`: what a consumer created there would
    // have pending (the stream's own counts include other subjects).
    const std::uint64_t at = parse_sequence(position);
    if (!js_) connect();
    {
      jsStreamInfo* raw = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      if (js_GetStreamInfo(&raw, js_.get(), c_.stream.c_str(), nullptr, &jerr) != NATS_OK)
        return std::nullopt;
      std::unique_ptr<jsStreamInfo, StreamInfoDeleter> si(raw);
      // Not 0: the messages the group will read are not the ones after its checkpoint.
      if (at > si->State.LastSeq) throw past_end(at, si->State.LastSeq);
    }
    jsConsumerConfig cc;
    init_consumer_config(cc, c_, at + 1);
    jsConsumerInfo* raw = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    if (js_AddConsumer(&raw, js_.get(), c_.stream.c_str(), &cc, nullptr, &jerr) != NATS_OK)
      return std::nullopt;
    std::unique_ptr<jsConsumerInfo, ConsumerInfoDeleter> ci(raw);
    auto pending = static_cast<std::int64_t>(ci->NumPending);
    js_DeleteConsumer(js_.get(), c_.stream.c_str(), ci->Name, nullptr, nullptr);
    return pending;
  }

  // The server places a consumer created with a deliver policy (all, new, by start time) and
  // reports the sequence before its first message as delivered: the position a group reads on
  // from. The consumer is deleted at once. A position past the stream's last sequence is
  // refused: the group would skip every message stored until then (docs/consumers.md, "Moving
  // and deleting a group").
  std::string position_for(const SeekTarget& t) override {
    if (t.kind == SeekTarget::Kind::position) {
      const std::uint64_t seq = parse_sequence(t.position);  // ConfigError naming it
      if (!js_) connect();
      jsStreamInfo* raw = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      natsStatus s = js_GetStreamInfo(&raw, js_.get(), c_.stream.c_str(), nullptr, &jerr);
      check_stream_call(s, jerr, "stream info");
      std::unique_ptr<jsStreamInfo, StreamInfoDeleter> si(raw);
      const std::uint64_t last = si->State.LastSeq;
      if (seq > last)
        throw ConfigError("nats source: position '" + t.position + "' is past the end of stream '" +
                              c_.stream + "' (its end: " + std::to_string(last) +
                              ", its last sequence)",
                          "nats");
      return t.position;
    }
    if (!js_) connect();
    if (t.kind == SeekTarget::Kind::time) return sequence_before(t.time);
    jsConsumerConfig cc;
    init_consumer_config(cc, c_, 1);
    if (t.kind == SeekTarget::Kind::end) cc.DeliverPolicy = js_DeliverNew;
    jsConsumerInfo* raw = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddConsumer(&raw, js_.get(), c_.stream.c_str(), &cc, nullptr, &jerr);
    check_stream_call(s, jerr, "create consumer");
    std::unique_ptr<jsConsumerInfo, ConsumerInfoDeleter> ci(raw);
    auto before = ci->Delivered.Stream;
    js_DeleteConsumer(js_.get(), c_.stream.c_str(), ci->Name, nullptr, nullptr);
    return std::to_string(before);
  }

 private:
  std::string group_text() const { return group_.empty() ? "GROUP" : group_; }
  std::string the_group() const { return group_.empty() ? "the group" : "group '" + group_ + "'"; }
  std::string way_out() const {
    return " Move the group: `outpost consumers seek --group " + group_text() +
           " --to beginning` reads the stream as it is now from its start, `--to end` skips what "
           "it holds (docs/consumers.md, \"A log deleted and re-created\")";
  }

  // The checkpoint is past the stream's last sequence: the stream was deleted and re-created
  // (or lost its tail), and reading on would skip its messages up to the checkpoint.
  Error past_end(std::uint64_t checkpoint, std::uint64_t last) const {
    return Error(ErrorCode::corrupt, "nats",
                 "the checkpoint of " + the_group() + " (sequence " + std::to_string(checkpoint) +
                     ") is past the end of stream '" + c_.stream + "' on " + c_.where +
                     " (its last sequence: " + std::to_string(last) +
                     "): the stream was deleted and re-created, or lost messages, since " +
                     the_group() + " read it, and reading on would skip its messages up to " +
                     "sequence " + std::to_string(checkpoint) + " in silence." + way_out());
  }

  // The stream as it is now against the checkpoint (the sequence before next_): past its end,
  // or created anew since this source first saw it, is an error (not retried); a missing stream
  // is waited for, as at the start.
  void check_stream() {
    if (!js_) connect();
    jsStreamInfo* raw = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&raw, js_.get(), c_.stream.c_str(), nullptr, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) {
      sub_.reset();  // its consumer went with the stream
      throw ConnectionError("nats", c_.where + ": stream '" + c_.stream + "' not found (yet)");
    }
    if (s != NATS_OK)
      throw ConnectionError("nats", c_.where + ": stream info: " + status_text(s) +
                                        (jerr ? " (err_code " + std::to_string(jerr) + ")" : ""));
    std::unique_ptr<jsStreamInfo, StreamInfoDeleter> si(raw);
    checked_ = std::chrono::steady_clock::now();
    const std::uint64_t at = next_ - 1, last = si->State.LastSeq;
    if (at > last) throw past_end(at, last);
    if (created_ && *created_ != si->Created && at > 0)
      throw Error(ErrorCode::corrupt, "nats",
                  "stream '" + c_.stream + "' on " + c_.where +
                      " was deleted and re-created while " + the_group() +
                      " read it (checkpoint: sequence " + std::to_string(at) +
                      ", the new stream's last sequence: " + std::to_string(last) +
                      "): its sequences restarted at 1, and reading on would skip its messages "
                      "up to sequence " +
                      std::to_string(at) + " in silence." + way_out());
    created_ = si->Created;
  }

  // A call about the group's stream: a missing stream is not_found (naming it), any other
  // failure a ConnectionError naming `what`.
  void check_stream_call(natsStatus s, jsErrCode jerr, const char* what) const {
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
      throw Error(ErrorCode::not_found, "nats",
                  c_.where + ": stream '" + c_.stream + "' does not exist");
    if (s != NATS_OK)
      throw ConnectionError("nats", c_.where + ": " + what + ": " + status_text(s) +
                                        (jerr ? " (err_code " + std::to_string(jerr) + ")" : ""));
  }

  // The position before the first message the stream stored at or after `time`: a binary
  // search over the stored messages' times (stream times only grow). Not a consumer created
  // with DeliverByStartTime: nats-server 2.9 sometimes placed it after the last message for a
  // time between two messages, and a seek to a time then skipped everything after it
  // (ConsumerGroupsBroker.NatsJetStream, about one run in six).
  std::string sequence_before(TimePoint time) {
    jsStreamInfo* raw = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&raw, js_.get(), c_.stream.c_str(), nullptr, &jerr);
    check_stream_call(s, jerr, "stream info");
    std::unique_ptr<jsStreamInfo, StreamInfoDeleter> si(raw);
    const std::uint64_t first = si->State.FirstSeq, last = si->State.LastSeq;
    if (last == 0 || first > last) return std::to_string(last);
    const std::int64_t target =
        std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
    std::uint64_t lo = first, hi = last + 1;  // the first message at or after `time`: in [lo, hi]
    while (lo < hi) {
      std::uint64_t mid = lo + (hi - lo) / 2;
      auto at = stored_time(mid);
      while (!at && ++mid < hi) at = stored_time(mid);  // a deleted message: the next one
      if (!at) {
        hi = lo + (hi - lo) / 2;  // nothing stored from there to hi: reading on from it is the same
        continue;
      }
      if (*at >= target)
        hi = mid;
      else
        lo = mid + 1;
    }
    return std::to_string(lo - 1);
  }

  // When the stream stored message `seq` (ns since the epoch), or nothing if it was deleted.
  std::optional<std::int64_t> stored_time(std::uint64_t seq) {
    natsMsg* raw = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetMsg(&raw, js_.get(), c_.stream.c_str(), seq, nullptr, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr) return std::nullopt;
    if (s != NATS_OK)
      throw ConnectionError("nats", c_.where + ": get message " + std::to_string(seq) + ": " +
                                        status_text(s) +
                                        (jerr ? " (err_code " + std::to_string(jerr) + ")" : ""));
    std::int64_t at = natsMsg_GetTime(raw);
    natsMsg_Destroy(raw);
    return at;
  }

  void connect() {
    nc_ = nats::connect(c_, c_.timeout, c_.where);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = c_.timeout.count();
    jsCtx* js = nullptr;
    natsStatus s = natsConnection_JetStream(&js, nc_.get(), &jo);
    if (s != NATS_OK) {
      nc_.reset();
      throw ConnectionError("nats", c_.where + ": jetstream: " + status_text(s));
    }
    js_.reset(js);
  }

  void subscribe() {
    check_stream();
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = c_.stream.c_str();
    init_consumer_config(so.Config, c_, next_);
    natsSubscription* sub = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s =
        js_PullSubscribe(&sub, js_.get(), c_.subject.c_str(), nullptr, nullptr, &so, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
      // The relay may not have created the stream yet: wait for it like for a missing file.
      throw ConnectionError("nats", c_.where + ": stream '" + c_.stream + "' not found (yet)");
    if (s != NATS_OK)
      throw ConnectionError("nats", c_.where + ": subscribe: " + status_text(s) +
                                        (jerr ? " (err_code " + std::to_string(jerr) + ")" : ""));
    sub_.reset(sub);
  }

  Message to_message(natsMsg* m) {
    Message msg;
    jsMsgMetaData* raw_meta = nullptr;
    if (natsMsg_GetMetaData(&raw_meta, m) != NATS_OK) return msg;
    std::unique_ptr<jsMsgMetaData, MetaDeleter> meta(raw_meta);
    const std::uint64_t seq = meta->Sequence.Stream;
    next_ = seq + 1;
    msg.position = std::to_string(seq);
    msg.event.payload.assign(natsMsg_GetData(m),
                             static_cast<std::size_t>(natsMsg_GetDataLength(m)));
    std::string id_text;
    const char** keys = nullptr;
    int count = 0;
    if (natsMsgHeader_Keys(m, &keys, &count) == NATS_OK) {
      for (int k = 0; k < count; ++k) {
        const char* v = nullptr;
        natsMsgHeader_Get(m, keys[k], &v);
        apply_cloudevents_header(msg, keys[k], v ? v : "", id_text);
      }
      free(keys);
    }
    finish_cloudevents_message(msg, id_text,
                               [&] { return "stream " + c_.stream + " sequence " + msg.position; });
    return msg;
  }

  Config c_;
  nats::ConnectionPtr nc_;
  std::unique_ptr<jsCtx, JsDeleter> js_;
  std::unique_ptr<natsSubscription, SubscriptionDeleter> sub_;
  std::uint64_t next_ = 1;                           // the stream sequence the next read starts at
  std::string group_;                                // set_group(): named in errors
  std::optional<std::int64_t> created_;              // the stream's creation time, once seen
  std::chrono::steady_clock::time_point checked_{};  // when check_stream() last ran
};

}  // namespace

std::unique_ptr<Source> open_nats_source(std::string_view text) {
  auto url = core::Url::parse(text);
  Config c;
  c.where = url.redacted();
  auto bad = [&](const std::string& what) {
    return ConfigError("nats source URL " + c.where + ": " + what, "nats");
  };
  nats::read_endpoint(url, c, bad);
  if (url.path().empty()) throw bad("subject (the URL path) missing");
  c.subject = filter_subject(url.path());
  auto stream = url.param("stream");
  if (!stream || stream->empty()) throw bad("parameter 'stream' (the JetStream stream) missing");
  c.stream = *stream;
  c.timeout = Duration{url.int_param("timeout_ms", 1, 3'600'000).value_or(10'000)};
  nats::read_publishing(url, SinkOptions{});  // the sink's own: one URL serves relay and consumer
  url.reject_unknown();
  return std::make_unique<NatsSource>(std::move(c));
}

}  // namespace outpost::consume
