#include "outpost/sinks/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cloudevents.h"
#include "core/key_seq.h"
#include "core/redact.h"
#include "core/sink_batch.h"
#include "core/url.h"
#include "outpost/error.h"
#include "sinks/http/http_classify.h"
#include "sinks/http/http_config.h"

namespace outpost {

namespace {

using http::HttpConfig;
using http::iequals;

constexpr std::size_t kBodyExcerpt = 200;  // bytes of an error response kept in the error

void global_init() {
  // curl_global_init is not thread-safe; do it once per process before any handle exists.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct EasyDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
struct MultiDeleter {
  void operator()(CURLM* h) const { curl_multi_cleanup(h); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using EasyPtr = std::unique_ptr<CURL, EasyDeleter>;
using MultiPtr = std::unique_ptr<CURLM, MultiDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

// CloudEvents HTTP binding: header values percent-encode space, '"', '%' and everything outside
// printable ASCII. This also keeps CR/LF from event data out of the request head.
std::string ce_header_value(std::string_view v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(v.size());
  for (char ch : v) {
    auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

// Header values that are not CloudEvents attributes: drop CR/LF so data cannot add headers.
std::string plain_header_value(std::string_view v) {
  std::string out;
  for (char c : v)
    if (c != '\r' && c != '\n') out += c;
  return out;
}

struct Request {
  EasyPtr easy;
  SlistPtr headers;
  std::string body_excerpt;
  std::string retry_after;  // the response's Retry-After header value, if any
  char errbuf[CURL_ERROR_SIZE] = {};
  std::size_t index = 0;  // event index in the current batch
  bool busy = false;
};

// Keeps at most kBodyExcerpt bytes of the response body; the rest is read and dropped so the
// connection stays reusable. A C callback: must not throw.
std::size_t write_body(char* data, std::size_t size, std::size_t nmemb, void* user) noexcept {
  std::size_t n = size * nmemb;
  try {
    auto* req = static_cast<Request*>(user);
    if (req->body_excerpt.size() < kBodyExcerpt)
      req->body_excerpt.append(data, std::min(n, kBodyExcerpt - req->body_excerpt.size()));
  } catch (...) {
    // Out of memory: the excerpt is only for messages; keep reading.
  }
  return n;
}

// Keeps the Retry-After header of the response (http::parse_retry_after reads it). A C callback:
// must not throw.
std::size_t read_header(char* data, std::size_t size, std::size_t nitems, void* user) noexcept {
  std::size_t n = size * nitems;
  static constexpr std::string_view kName = "retry-after:";
  std::string_view line(data, n);
  if (line.size() > kName.size() && iequals(line.substr(0, kName.size()), kName)) {
    std::string_view value = line.substr(kName.size());
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!value.empty() && space(value.front())) value.remove_prefix(1);
    while (!value.empty() && space(value.back())) value.remove_suffix(1);
    try {
      static_cast<Request*>(user)->retry_after.assign(value.substr(0, 100));
    } catch (...) {
      // Out of memory: without the hint the relay backs off on its own schedule.
    }
  }
  return n;
}

class HttpSink final : public Sink {
 public:
  explicit HttpSink(HttpConfig config) : config_(std::move(config)) {
    global_init();
    multi_.reset(curl_multi_init());
    if (!multi_) throw Error(ErrorCode::internal, "http", "curl_multi_init failed");
    auto conns = static_cast<long>(config_.concurrency);
    curl_multi_setopt(multi_.get(), CURLMOPT_MAX_HOST_CONNECTIONS, conns);
    curl_multi_setopt(multi_.get(), CURLMOPT_MAXCONNECTS, conns);
    for (std::size_t i = 0; i < config_.concurrency; ++i) {
      auto req = std::make_unique<Request>();
      req->easy.reset(curl_easy_init());
      if (!req->easy) throw Error(ErrorCode::internal, "http", "curl_easy_init failed");
      requests_.push_back(std::move(req));
    }
  }

  ~HttpSink() override {
    for (auto& r : requests_)
      if (r->busy) curl_multi_remove_handle(multi_.get(), r->easy.get());
    // Easy handles must be cleaned up before the multi handle that holds their connections.
    requests_.clear();
  }

  std::string_view name() const override { return "http"; }

  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    return deliver_with(events, nullptr);
  }

  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl& control) override {
    return deliver_with(events, &control);
  }

 private:
  std::vector<DeliveryResult> deliver_with(std::span<const StoredEvent> events,
                                           const DeliveryControl* control) {
    std::lock_guard lock(mu_);
    // Events that never get an outcome were not started (the relay's deadline or stop).
    std::vector<DeliveryResult> results(events.size(), DeliveryControl::not_started());
    if (events.empty()) return results;
    try {
      run(events, results, control);
    } catch (...) {
      abort_in_flight();
      throw;
    }
    return results;
  }

  // Schedules the batch: events of one non-empty key form a chain sent one after another;
  // an empty key is a chain of its own. Ready chains start in batch order, up to
  // `concurrency` requests at once.
  // With a `control`, no request starts once it says so, and requests in flight are given up
  // at its deadline (failed) or, when stopping, at its abandon time (skipped).
  void run(std::span<const StoredEvent> events, std::vector<DeliveryResult>& results,
           const DeliveryControl* control) {
    const std::size_t n = events.size();
    std::vector<std::size_t> next_in_chain(n, n);  // n: last of its key
    {
      std::unordered_map<std::string_view, std::size_t> last_of_key;
      for (std::size_t i = 0; i < n; ++i) {
        if (events[i].key.empty()) continue;
        auto [it, inserted] = last_of_key.try_emplace(events[i].key, i);
        if (!inserted) {
          next_in_chain[it->second] = i;
          it->second = i;
        }
      }
    }
    // Heads of chains that may start now, smallest index first.
    std::set<std::size_t> ready;
    {
      std::unordered_map<std::string_view, bool> seen;
      for (std::size_t i = 0; i < n; ++i)
        if (events[i].key.empty() || seen.try_emplace(events[i].key, true).second) ready.insert(i);
    }

    // Once a request found the webhook unavailable, nothing more is started: each request would
    // only find it down again, a connect timeout at a time (docs/sinks_file_http.md).
    const DeliveryResult* down = nullptr;
    std::size_t in_flight = 0;
    while (!ready.empty() || in_flight > 0) {
      if (control && cut_short(*control, results, ready)) return;
      std::vector<std::size_t> started;  // prepared, not yet sent
      while (!ready.empty() && in_flight < requests_.size()) {
        std::size_t i = *ready.begin();
        ready.erase(ready.begin());
        start(events[i], i);
        started.push_back(i);
        ++in_flight;
      }
      // Preparing requests takes time, and a process stopped meanwhile (SIGSTOP, a VM pause)
      // may find its lease gone when it runs again: look at the control once more just before
      // anything is sent, and take back what was prepared (docs/relay.md, "The lease deadline").
      if (control && !started.empty() && !control->may_start(DeliveryControl::Clock::now())) {
        for (auto& r : requests_)
          if (r->busy && std::find(started.begin(), started.end(), r->index) != started.end()) {
            curl_multi_remove_handle(multi_.get(), r->easy.get());
            r->busy = false;
            --in_flight;
          }
        ready.clear();
      }
      int running = 0;
      CURLMcode mc = curl_multi_perform(multi_.get(), &running);
      if (mc != CURLM_OK) throw Error(ErrorCode::internal, "http", curl_multi_strerror(mc));
      bool finished_any = false;
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi_.get(), &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        Request* req = nullptr;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &req);
        curl_multi_remove_handle(multi_.get(), msg->easy_handle);
        req->busy = false;
        --in_flight;
        finished_any = true;
        std::size_t i = req->index;
        results[i] = outcome(*req, msg->data.result);
        std::size_t next = next_in_chain[i];
        if (results[i].ok()) {
          if (next < n) ready.insert(next);
        } else {
          // The key's later events must not overtake the failed one (guarantee 5).
          for (; next < n; next = next_in_chain[next])
            results[next] = DeliveryResult::held_back(events[i].key);
          if (results[i].status == DeliveryResult::Status::unavailable && !down) down = &results[i];
        }
      }
      if (down) {
        for (std::size_t head : ready) {
          results[head] = core::not_sent_while_unavailable(*down);
          for (std::size_t next = next_in_chain[head]; next < n; next = next_in_chain[next])
            results[next] = DeliveryResult::held_back(events[head].key);
        }
        ready.clear();
      }
      if (!finished_any && in_flight > 0) {
        // With a control, look at it again at least every DeliveryControl::kPollInterval.
        int wait_ms = control ? static_cast<int>(DeliveryControl::kPollInterval.count()) : 1000;
        mc = curl_multi_poll(multi_.get(), nullptr, 0, wait_ms, nullptr);
        if (mc != CURLM_OK) throw Error(ErrorCode::internal, "http", curl_multi_strerror(mc));
      }
    }
  }

  // Applies the relay's bounds: true when the call must return now (requests in flight were
  // given up); otherwise clears `ready` once nothing more may start.
  bool cut_short(const DeliveryControl& control, std::vector<DeliveryResult>& results,
                 std::set<std::size_t>& ready) {
    const auto now = DeliveryControl::Clock::now();
    if (!control.may_start(now)) ready.clear();  // never started: they stay `skipped`
    DeliveryResult given_up;
    if (now >= control.deadline())
      given_up = DeliveryResult::failed(control.timed_out_error());
    else if (control.stopping() && now >= control.abandon_at())
      given_up = DeliveryControl::abandoned();
    else
      return false;
    for (auto& r : requests_)
      if (r->busy) results[r->index] = given_up;
    abort_in_flight();
    return true;
  }

  void start(const StoredEvent& e, std::size_t index) {
    Request* req = nullptr;
    for (auto& r : requests_)
      if (!r->busy) {
        req = r.get();
        break;
      }
    CURL* h = req->easy.get();
    // reset keeps the connection cache, DNS cache and TLS sessions; only options are cleared.
    curl_easy_reset(h);
    req->index = index;
    req->body_excerpt.clear();
    req->retry_after.clear();
    req->errbuf[0] = '\0';

    curl_slist* list = nullptr;
    auto add = [&list](const std::string& line) {
      curl_slist* grown = curl_slist_append(list, line.c_str());
      if (!grown) {
        curl_slist_free_all(list);
        throw std::bad_alloc();
      }
      list = grown;
    };
    // CloudEvents HTTP binding: datacontenttype is the Content-Type (the payload's kind, from the
    // event's content_type header), unless the URL sets header.Content-Type for every request.
    for (const auto& [k, v] : core::cloudevents_headers(e)) {
      if (k == core::kCloudEventsContentType) {
        if (!config_.has_content_type) add("Content-Type: " + plain_header_value(v));
        continue;
      }
      // traceparent/tracestate as W3C Trace Context writes them (not percent-encoded: a
      // tracestate may hold spaces after its commas), CR/LF dropped like every plain header.
      if (core::trace_context_header(k)) {
        add(k + ": " + plain_header_value(v));
        continue;
      }
      add(k + ": " + ce_header_value(v));
    }
    add("Idempotency-Key: " + e.id.str());
    char seq[24];
    if (auto key_seq = core::format_key_seq(e, seq); !key_seq.empty())
      add(std::string(kKeySeqHeader) + ": " + std::string(key_seq));  // outpost/key_seq.h
    for (const auto& [k, v] : config_.headers) add(k + ": " + v);
    add("Expect:");  // no 100-continue round trip for large bodies
    req->headers.reset(list);

    curl_easy_setopt(h, CURLOPT_URL, config_.target.c_str());
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, e.payload.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(e.payload.size()));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, req->headers.get());
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, config_.timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, config_.timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &write_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, req);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &read_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, req);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, req->errbuf);
    curl_easy_setopt(h, CURLOPT_PRIVATE, req);
    // OUTPOST_VERSION: the project version, from CMake (src/sinks/http/CMakeLists.txt).
    curl_easy_setopt(h, CURLOPT_USERAGENT, "outpost/" OUTPOST_VERSION);

    CURLMcode mc = curl_multi_add_handle(multi_.get(), h);
    if (mc != CURLM_OK) throw Error(ErrorCode::internal, "http", curl_multi_strerror(mc));
    req->busy = true;
  }

  // The one place a request's result becomes an outcome; the class comes from http::classify.
  DeliveryResult outcome(const Request& req, CURLcode code) const {
    long status = 0;
    if (code == CURLE_OK) curl_easy_getinfo(req.easy.get(), CURLINFO_RESPONSE_CODE, &status);
    const http::Outcome cls = http::classify(code, status);
    if (cls == http::Outcome::delivered) return DeliveryResult::delivered();
    std::string why;
    Duration retry_after{0};
    if (code != CURLE_OK) {
      long os_errno = 0;
      curl_easy_getinfo(req.easy.get(), CURLINFO_OS_ERRNO, &os_errno);
      why = transport_phrase(code, os_errno);
      why += config_.secrets.redact(req.errbuf[0] ? req.errbuf : curl_easy_strerror(code));
      why += " (POST " + config_.shown + ")";
    } else {
      why = "HTTP " + std::to_string(status);
      if (cls == http::Outcome::unavailable && !req.retry_after.empty()) {
        retry_after = http::parse_retry_after(req.retry_after, std::chrono::system_clock::now());
        why += " (Retry-After: " + config_.secrets.redact(req.retry_after) + ")";
      }
      if (!req.body_excerpt.empty()) why += ": " + config_.secrets.redact(req.body_excerpt);
    }
    if (cls == http::Outcome::unavailable) return core::unavailable(why, retry_after);
    return core::refused(why);
  }

  // What a transport error means, in words, before curl's own text.
  std::string transport_phrase(CURLcode code, long os_errno) const {
    switch (code) {
      case CURLE_COULDNT_CONNECT:
        return os_errno == ECONNREFUSED ? "connection refused: " : "cannot connect: ";
      case CURLE_OPERATION_TIMEDOUT:
        return "timeout after " + std::to_string(config_.timeout_ms) + " ms (timeout_ms): ";
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
        return "DNS: ";
      case CURLE_SSL_CONNECT_ERROR:
      case CURLE_PEER_FAILED_VERIFICATION:
        return "TLS handshake: ";
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR:
        return os_errno == ECONNRESET ? "connection reset: " : "connection broken: ";
      case CURLE_GOT_NOTHING:
        return "connection closed without a response: ";
      default:
        return {};
    }
  }

  void abort_in_flight() noexcept {
    for (auto& r : requests_)
      if (r->busy) {
        curl_multi_remove_handle(multi_.get(), r->easy.get());
        r->busy = false;
      }
  }

  const HttpConfig config_;
  std::mutex mu_;  // serialises deliver(); guards the handles below
  MultiPtr multi_;
  std::vector<std::unique_ptr<Request>> requests_;  // one easy handle per concurrency slot
};

}  // namespace

std::unique_ptr<Sink> http::make_http_sink(HttpConfig config) {
  return std::make_unique<HttpSink>(std::move(config));
}

}  // namespace outpost
