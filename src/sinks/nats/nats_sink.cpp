// NATS JetStream sink over cnats: see include/outpost/sinks/nats.h for the contract.
//
// deliver() publishes the batch with js_PublishMsgAsync (MsgId = event id) and waits for the
// PubAcks, which cnats hands to on_ack() on its own delivery thread; the per-call state is
// therefore guarded by mu_. PubAcks are matched to events by the message they acknowledge (cnats
// hands back the natsMsg we published, which stays alive until on_ack destroys it, so its
// address identifies one event of the current call). What is
// still unacknowledged when the call gives up is taken back from cnats
// (js_PublishAsyncGetPendingList) so that it neither occupies the pending window nor acks a
// later call; if the server stored it anyway, the redelivery is a duplicate it drops.

#include "outpost/sinks/nats.h"

#include <nats/nats.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/key_seq.h"
#include "core/sink_batch.h"
#include "core/url.h"
#include "outpost/error.h"
#include "sinks/nats/nats_classify.h"
#include "sinks/nats/nats_common.h"

namespace outpost {

namespace nats {

Outcome classify(natsStatus status, int js_code) {
  switch (js_code) {
    case 0:
      break;
    case JSNotEnabledErr:
    case JSNotEnabledForAccountErr:
    case JSClusterNotAvailErr:
    case JSClusterNotLeaderErr:
    case JSClusterNoPeersErr:
    case JSInsufficientResourcesErr:
    case JSMemoryResourcesExceededErr:
    case JSStorageResourcesExceededErr:
    case JSStreamStoreFailedErr:  // "maximum messages exceeded": a full stream, like a full disk
    case JSStreamLimitsErr:
      return Outcome::unavailable;
    default:
      return Outcome::refused;
  }
  switch (status) {
    case NATS_NO_RESPONDERS:
    case NATS_TIMEOUT:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NO_SERVER:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
    case NATS_NOT_YET_CONNECTED:
    case NATS_DRAINING:
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_SECURE_CONNECTION_REQUIRED:
    case NATS_SSL_ERROR:
    case NATS_NO_MEMORY:
    // While the server is away the client keeps publishes in its reconnect buffer; once that is
    // full a publish fails with this: the same outage, not a refusal of the event.
    case NATS_INSUFFICIENT_BUFFER:
      return Outcome::unavailable;
    default:
      return Outcome::refused;
  }
}

}  // namespace nats

namespace {

// The one place a failure becomes an outcome (nats::classify), its text naming the class.
DeliveryResult outcome_of(natsStatus status, int js_code, const std::string& why) {
  return nats::classify(status, js_code) == nats::Outcome::unavailable ? core::unavailable(why)
                                                                       : core::refused(why);
}

using nats::JsDeleter;
using nats::status_text;
struct MsgDeleter {
  void operator()(natsMsg* m) const { natsMsg_Destroy(m); }
};
struct StreamInfoDeleter {
  void operator()(jsStreamInfo* si) const { jsStreamInfo_Destroy(si); }
};

// NATS headers are line based: a CR or LF in a value would end the header block. Returns
// `v` itself when it is clean (the usual case), else a cleaned copy in `scratch`. NUL-terminated.
const char* header_safe(std::string_view v, std::string& scratch) {
  if (v.find_first_of("\r\n") == std::string_view::npos) return v.data();
  scratch.assign(v);
  for (auto& c : scratch)
    if (c == '\r' || c == '\n') c = ' ';
  return scratch.c_str();
}

const char* conn_status_text(natsConnStatus s) {
  switch (s) {
    case NATS_CONN_STATUS_DISCONNECTED:
      return "disconnected";
    case NATS_CONN_STATUS_CONNECTING:
      return "connecting";
    case NATS_CONN_STATUS_CONNECTED:
      return "connected";
    case NATS_CONN_STATUS_CLOSED:
      return "closed";
    case NATS_CONN_STATUS_RECONNECTING:
      return "reconnecting";
    default:
      return "draining";
  }
}

struct NatsConfig : nats::Endpoint, nats::Publishing {
  std::string subject_template;
  std::string stream;
  Duration timeout{10'000};
};

class NatsSink final : public Sink {
 public:
  explicit NatsSink(NatsConfig config) : config_(std::move(config)) {
    // Outages of any length: reconnect forever; deliveries fail meanwhile (no buffering of
    // publishes that the relay would think are in flight).
    // No reconnect buffer worth the name: publishes made while reconnecting must fail (we
    // report them failed), not be replayed later behind our back, where a replayed later event
    // of a key could land before the redelivery of an earlier one that was lost.
    nc_ = nats::connect(config_, config_.timeout, "nats sink " + config_.where,
                        [](natsOptions* o) { natsOptions_SetReconnectBufSize(o, 1); });

    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = config_.timeout.count();
    jo.PublishAsync.MaxPending = config_.max_pending;
    jo.PublishAsync.AckHandler = &NatsSink::on_ack;
    jo.PublishAsync.AckHandlerClosure = this;
    jo.PublishAsync.StallWait = config_.timeout.count();
    jsCtx* js = nullptr;
    check(natsConnection_JetStream(&js, nc_.get(), &jo), "jetstream context");
    js_.reset(js);
    ensure_stream();
  }

  ~NatsSink() override {
    close();
    js_.reset();
    nc_.reset();
  }

  std::string_view name() const override { return "nats"; }

  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    std::vector<DeliveryResult> results(events.size());
    if (events.empty()) return results;
    const auto st = natsConnection_Status(nc_.get());
    if (st != NATS_CONN_STATUS_CONNECTED) {
      const std::string why = "nats " + config_.where + ": connection " + conn_status_text(st) +
                              last_connection_error();
      for (auto& r : results) r = outcome_of(NATS_CONNECTION_DISCONNECTED, 0, why);
      core::hold_back_failed_keys(events, results);
      return results;
    }
    {
      std::lock_guard lock(mu_);
      index_.clear();
      index_.reserve(events.size());
      done_.assign(events.size(), false);
      results_ = &results;
      outstanding_ = 0;
    }
    for (std::size_t i = 0; i < events.size(); ++i) {
      // A publish that found the server unavailable (a stall on a full pending window waits
      // timeout_ms): the rest would only wait the same again.
      if (publish_unavailable_) {
        std::lock_guard lock(mu_);
        done_[i] = true;
        results[i] = core::not_sent_while_unavailable(*publish_unavailable_);
        continue;
      }
      publish(events[i], i);
    }
    publish_unavailable_.reset();
    wait_for_acks();
    {
      std::lock_guard lock(mu_);
      if (outstanding_ > 0) {
        const auto cs = natsConnection_Status(nc_.get());
        std::string why =
            cs == NATS_CONN_STATUS_CONNECTED
                ? "no PubAck within " + std::to_string(config_.timeout.count()) + " ms"
                : std::string("connection ") + conn_status_text(cs) + " before the PubAck" +
                      last_connection_error();
        for (std::size_t i = 0; i < events.size(); ++i)
          if (!done_[i]) results[i] = outcome_of(NATS_TIMEOUT, 0, "nats: " + why);
      }
      results_ = nullptr;
      index_.clear();
      outstanding_ = 0;
    }
    core::hold_back_failed_keys(events, results);
    return results;
  }

  void close() override {
    if (js_) {
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MaxWait = config_.timeout.count();
      js_PublishAsyncComplete(js_.get(), &po);
    }
  }

 private:
  void check(natsStatus s, const char* what) const {
    if (s != NATS_OK)
      throw ConfigError("nats sink " + config_.where + ": " + what + ": " + status_text(s), "nats");
  }

  std::string last_connection_error() const {
    const char* last = nullptr;
    natsConnection_GetLastError(nc_.get(), &last);
    return last && *last ? std::string(" (last error: ") + last + ")" : std::string();
  }

  void ensure_stream() {
    jsStreamInfo* raw = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&raw, js_.get(), config_.stream.c_str(), nullptr, &jerr);
    std::unique_ptr<jsStreamInfo, StreamInfoDeleter> si(raw);
    if (s == NATS_NOT_FOUND && config_.create) {
      std::string subject = config_.subject_template;
      const bool tail = subject.size() >= 6 && subject.ends_with("{type}");
      subject = core::render_type_template(subject, tail ? ">" : "*");
      const char* subjects[] = {subject.c_str()};
      jsStreamConfig cfg;
      jsStreamConfig_Init(&cfg);
      cfg.Name = config_.stream.c_str();
      cfg.Subjects = subjects;
      cfg.SubjectsLen = 1;
      cfg.Storage = js_FileStorage;
      if (config_.dup_window_ms > 0) cfg.Duplicates = config_.dup_window_ms * 1'000'000;
      raw = nullptr;
      s = js_AddStream(&raw, js_.get(), &cfg, nullptr, &jerr);
      si.reset(raw);
    }
    if (s == NATS_NOT_FOUND)
      throw Error(ErrorCode::not_found, "nats",
                  "nats sink " + config_.where + ": stream '" + config_.stream +
                      "' does not exist (add &create=1 to create it)");
    if (s != NATS_OK)
      throw ConnectionError("nats", "nats sink " + config_.where + ": stream '" + config_.stream +
                                        "': " + status_text(s));
    // A publish may be sent again after its lease expired (the relay died before its ack) or,
    // when its PubAck never came (unavailable), by the pause's next probe: within lease +
    // kMaxProbeWait and the pause's jitter of up to a tenth. A refused publish was not stored,
    // so its retries need no deduplication.
    const Duration probe = std::min(config_.backoff_max, kMaxProbeWait);
    const Duration horizon = config_.lease + probe + probe / 10;
    if (si && si->Config && horizon.count() > 0) {
      const std::int64_t window_ms = si->Config->Duplicates / 1'000'000;
      if (window_ms < horizon.count())
        std::fprintf(
            stderr,
            "outpost: warning: nats stream '%s' has a duplicate window of %lld ms, shorter "
            "than the relay's lease + longest probe wait (%lld ms): a redelivery after that "
            "is not deduplicated by the server (raise the stream's duplicate_window)\n",
            config_.stream.c_str(), static_cast<long long>(window_ms),
            static_cast<long long>(horizon.count()));
    }
    // JetStream acks before its fsync by default (Jepsen, NATS 2.12.1: acknowledged writes lost
    // on power loss); the sink cannot read the server's setting, so the user confirms it.
    if (!config_.sync_always)
      std::fprintf(stderr,
                   "outpost: warning: a JetStream PubAck does not mean the event is on disk: "
                   "nats-server fsyncs streams every 2 minutes by default, so a machine crash or "
                   "power loss can lose acknowledged events; set 'sync_interval: always' in the "
                   "server's jetstream block (nats-server 2.10 or later) and add sync_always=1 "
                   "to the sink URL (docs/sinks.md, NATS durability)\n");
  }

  // The subject of an event of `type` (the template rendered once per type).
  const std::string& subject_for(const std::string& type) {
    if (!per_type_) return config_.subject_template;
    if (auto it = subjects_.find(type); it != subjects_.end()) return it->second;
    if (subjects_.size() >= 4096) subjects_.clear();
    return subjects_.emplace(type, core::render_type_template(config_.subject_template, type))
        .first->second;
  }

  void publish(const StoredEvent& event, std::size_t index) {
    const std::string& subject = subject_for(event.type);
    char id_buf[37];
    const std::string_view id = core::format_event_id(event.id, id_buf);
    auto fail = [&](natsStatus status, const std::string& why) {
      std::lock_guard lock(mu_);
      if (!done_[index]) {
        done_[index] = true;
        (*results_)[index] = outcome_of(status, 0, why);
        if ((*results_)[index].status == DeliveryResult::Status::unavailable)
          publish_unavailable_ = (*results_)[index];
      }
    };
    natsMsg* raw = nullptr;
    natsStatus s = natsMsg_Create(&raw, subject.c_str(), nullptr, event.payload.data(),
                                  static_cast<int>(event.payload.size()));
    if (s != NATS_OK) return fail(s, "nats message for '" + subject + "': " + status_text(s));
    std::unique_ptr<natsMsg, MsgDeleter> msg(raw);
    core::for_each_cloudevents_header(
        event, id, time_, attr_, [&](std::string_view name, std::string_view value) {
          natsMsgHeader_Set(msg.get(), name.data(), header_safe(value, clean_));
        });
    char seq[24];
    if (auto key_seq = core::format_key_seq(event, seq); !key_seq.empty())
      natsMsgHeader_Set(msg.get(), kKeySeqHeader.data(), key_seq.data());  // outpost/key_seq.h
    const natsMsg* key = msg.get();
    {
      std::lock_guard lock(mu_);
      index_[key] = index;
      ++outstanding_;
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = id.data();
    natsMsg* handoff = msg.release();
    s = js_PublishMsgAsync(js_.get(), &handoff, &po);
    if (s != NATS_OK) {
      // cnats kept no reference (handoff is still ours): no PubAck can come for it.
      {
        std::lock_guard lock(mu_);
        if (index_.erase(key)) --outstanding_;
      }
      natsMsg_Destroy(handoff);
      fail(s, "nats publish to '" + subject + "': " + status_text(s));
      return;
    }
    natsMsg_Destroy(handoff);  // no-op: cnats took ownership
  }

  void wait_for_acks() {
    const auto deadline = std::chrono::steady_clock::now() + config_.timeout;
    {
      std::unique_lock lock(mu_);
      // on_ack notifies when the last PubAck of the call arrived; wake every 100 ms to notice
      // a lost connection (no PubAck will come then).
      while (outstanding_ > 0) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) break;
        lock.unlock();  // not holding mu_ while taking cnats' connection lock
        const bool connected = natsConnection_Status(nc_.get()) == NATS_CONN_STATUS_CONNECTED;
        lock.lock();
        if (!connected) break;
        ack_cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)),
                           [&] { return outstanding_ == 0; });
      }
      if (outstanding_ == 0) return;
    }
    // Give up on what is still pending: take it back so it cannot ack a later call.
    natsMsgList pending{};
    if (js_PublishAsyncGetPendingList(&pending, js_.get()) == NATS_OK)
      natsMsgList_Destroy(&pending);
  }

  static void on_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
    try {
      static_cast<NatsSink*>(closure)->handle_ack(msg, pa, pae);
    } catch (...) {
      // Nothing may cross the C callback; the event then fails by timeout.
    }
    natsMsg_Destroy(msg);
  }

  void handle_ack(natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae) {
    std::lock_guard lock(mu_);
    if (!results_) return;
    auto it = index_.find(msg);
    if (it == index_.end()) return;
    const std::size_t i = it->second;
    index_.erase(it);
    --outstanding_;
    if (!done_[i]) {
      done_[i] = true;
      if (pa) {
        (*results_)[i] = DeliveryResult::delivered();  // a duplicate is stored already: delivered
      } else {
        std::string why = "nats: ";
        if (pae && pae->ErrText)
          why += pae->ErrText;
        else if (pae)
          why += natsStatus_GetText(pae->Err);
        else
          why += "negative PubAck";
        if (pae && pae->ErrCode) why += " (err_code " + std::to_string(pae->ErrCode) + ")";
        (*results_)[i] =
            pae ? outcome_of(pae->Err, static_cast<int>(pae->ErrCode), why) : core::refused(why);
      }
    }
    if (outstanding_ == 0) ack_cv_.notify_all();
  }

  NatsConfig config_;
  bool per_type_ = config_.subject_template.find("{type}") != std::string::npos;
  std::unordered_map<std::string, std::string> subjects_;  // event type -> subject
  core::Rfc3339Formatter time_;
  std::string attr_, clean_;  // scratch for header names and cleaned values
  nats::ConnectionPtr nc_;
  std::unique_ptr<jsCtx, JsDeleter> js_;

  std::mutex mu_;  // guards the per-call state below (PubAcks arrive on cnats' thread)
  std::condition_variable ack_cv_;
  std::unordered_map<const natsMsg*, std::size_t> index_;  // published, awaiting PubAck
  std::vector<bool> done_;
  std::vector<DeliveryResult>* results_ = nullptr;
  std::size_t outstanding_ = 0;
  // Set when a publish of this call found the server unavailable; written and read only on
  // the deliver() thread (publish() runs there).
  std::optional<DeliveryResult> publish_unavailable_;
};

}  // namespace

namespace {

// The URL read and checked, nothing connected: the same code opens and checks (check_sink_url).
NatsConfig parse_nats_url(std::string_view text, const SinkOptions& options) {
  const auto url = core::Url::parse(text);
  NatsConfig c;
  c.where = url.redacted();
  auto bad = [&](const std::string& what) {
    return ConfigError("nats sink URL " + c.where + ": " + what, "nats");
  };
  if (url.scheme() != "nats") throw bad("scheme must be nats://");
  nats::read_endpoint(url, c, bad);
  c.subject_template = url.path();
  if (c.subject_template.empty()) throw bad("subject (the URL path) missing");
  auto stream = url.param("stream");
  if (!stream || stream->empty()) throw bad("parameter 'stream' (the JetStream stream) missing");
  c.stream = *stream;
  static_cast<nats::Publishing&>(c) = nats::read_publishing(url, options);
  c.timeout = Duration{url.int_param("timeout_ms", 1, 3'600'000).value_or(options.timeout.count())};
  url.reject_unknown();
  return c;
}

}  // namespace

std::unique_ptr<Sink> open_nats_sink(std::string_view text, const SinkOptions& options) {
  return std::make_unique<NatsSink>(parse_nats_url(text, options));
}

void check_nats_sink_url(std::string_view text) {
  parse_nats_url(text, SinkOptions{});
}

}  // namespace outpost
