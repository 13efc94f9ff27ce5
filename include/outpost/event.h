#pragma once
// The event model: an immutable fact with a time-ordered id (UUIDv7).

#include <array>
#include <chrono>
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace outpost {

using Clock = std::chrono::system_clock;
using TimePoint = std::chrono::time_point<Clock, std::chrono::microseconds>;
using Duration = std::chrono::milliseconds;

// A 128-bit UUID. generate() makes UUIDv7 ids: 48-bit Unix milliseconds, then a 12-bit counter
// and random bits, monotonic within a process (ids from one process sort in generation order,
// also when many are made in one millisecond). Any UUID version is accepted on input.
class EventId {
 public:
  EventId() = default;  // the nil UUID
  static EventId generate();
  // Accepts the canonical 8-4-4-4-12 hex form (either case). nullopt when malformed.
  static std::optional<EventId> parse(std::string_view text);
  static EventId from_bytes(const std::uint8_t* bytes16);

  std::string str() const;  // canonical lowercase 8-4-4-4-12
  const std::array<std::uint8_t, 16>& bytes() const { return bytes_; }
  bool is_nil() const;

  friend auto operator<=>(const EventId&, const EventId&) = default;
  friend bool operator==(const EventId&, const EventId&) = default;

 private:
  std::array<std::uint8_t, 16> bytes_{};
};

struct EventIdHash {
  std::size_t operator()(const EventId& id) const noexcept;
};

using Headers = std::map<std::string, std::string, std::less<>>;

// Well-known header names (docs/sinks.md, "Trace context"). Users may add their own.
namespace header {
inline constexpr std::string_view kCorrelationId = "correlation_id";
inline constexpr std::string_view kCausationId = "causation_id";
// W3C Trace Context (https://www.w3.org/TR/trace-context/): given at emit, delivered by every
// sink under these names, as tracing libraries read them (docs/sinks.md, "Trace context").
inline constexpr std::string_view kTraceparent = "traceparent";
inline constexpr std::string_view kTracestate = "tracestate";
inline constexpr std::string_view kSchemaVersion = "schema_version";
// Reserved: the payload's media type (CloudEvents `datacontenttype`). Absent means JSON, the
// convention; see PayloadKind.
inline constexpr std::string_view kContentType = "content_type";
}  // namespace header

// What the payload bytes are, so that they come out as they went in (docs/cli.md, "The JSON
// encoding"). Decided by the `content_type` header alone:
//   json    absent, application/json or any */*+json: a JSON text, embedded as a JSON value;
//   text    text/*: UTF-8 text, a JSON string in the JSON encoding;
//   binary  anything else (application/octet-stream, image/png, ...): any bytes, base64 in the
//           JSON encoding ("payload_base64"), raw to brokers and HTTP.
enum class PayloadKind { json, text, binary };
inline constexpr std::string_view kJsonContentType = "application/json";
inline constexpr std::string_view kTextContentType = "text/plain; charset=utf-8";
inline constexpr std::string_view kBinaryContentType = "application/octet-stream";
PayloadKind payload_kind(std::string_view content_type);

struct Event {
  EventId id;             // nil: the store assigns a fresh UUIDv7 on append
  std::string type;       // required, non-empty
  std::string key;        // aggregate / partition key; empty = no order constraint
  std::string payload;    // bytes; JSON by convention
  TimePoint occurred_at;  // epoch (zero): set to now on append
  Headers headers;
  // Scheduled delivery (docs/relay.md, "Scheduled delivery"): when set and in the future, the
  // store holds the event until then (its due time); in ordered mode it also holds back the
  // later events of its key. Unset (or past): due at once.
  std::optional<TimePoint> deliver_at;

  // Convenience: a new event with a fresh id and occurred_at = now.
  static Event make(std::string type, std::string payload, std::string key = {});

  // The `content_type` header, or application/json when there is none.
  std::string_view content_type() const;
  PayloadKind payload_kind() const { return outpost::payload_kind(content_type()); }
};

// Limits every store enforces on append, the same everywhere (docs/cli.md, "Input rules"):
// type, key, header names and values are UTF-8 without NUL, within these sizes in bytes. The
// payload limit is StoreOptions::max_payload_bytes. (The key bound keeps a key inside every
// store's index: PostgreSQL's B-tree takes about 2.7 kB a row.)
namespace limits {
inline constexpr std::size_t kMaxTypeBytes = 255;
inline constexpr std::size_t kMaxKeyBytes = 1024;
inline constexpr std::size_t kMaxHeaders = 64;
inline constexpr std::size_t kMaxHeaderNameBytes = 255;
inline constexpr std::size_t kMaxHeaderValueBytes = 8 * 1024;
}  // namespace limits

// An event as read back from a store.
struct StoredEvent : Event {
  std::int64_t seq = 0;  // the store's sequence: emit (commit) order; defines per-key order
  int attempts = 0;      // delivery attempts so far, counting the current one after a claim
  // Claims of this event whose lease expired with no outcome recorded (the relay died or hung,
  // or could not write the outcome to the store). Not delivery attempts: a separate counter with
  // its own limit detects an event that crashes relays (docs/relay.md, "Crash counting").
  int crashes = 0;
};

struct DeadEvent : StoredEvent {
  std::string last_error;
  TimePoint dead_at;
};

// An acked event kept in the archive (StoreOptions::archive), as Store::archived reads it.
struct ArchivedEvent : StoredEvent {
  TimePoint archived_at;  // when it was acked (the store's clock)
};

// ---- Trace context and the causal chain (docs/sinks.md, "Trace context") ----

// Empty when the event's trace context headers are well formed; else what is wrong, naming the
// header: `traceparent` must be W3C version-format `VV-<32 hex trace id>-<16 hex parent id>-FF`
// (lowercase hex, ids not all zero, version not ff; version 00 exactly 55 characters, a later
// version may add `-...`), `tracestate` (at most 512 printable ASCII characters) needs a
// traceparent, and neither may be spelt in another case (`Traceparent`), since tracing
// libraries look for the lowercase names. check_trace_context throws it as a ConfigError
// prefixed with `where`. Bus::emit and `outpost emit` check it; a store's append keeps headers as
// given.
std::string trace_context_problem(const Headers& headers);
void check_trace_context(const Event& event, std::string_view where);

// While a handler handles `handled` on this thread (HandlerSink, hence the Bus, sets one around
// each handler call; a consumer can do the same around its handler), events appended on this
// thread take their causal chain from it unless they give their own: correlation_id = the
// handled event's correlation_id (its id when it has none), causation_id = its id, and its
// traceparent/tracestate unchanged. Scopes nest; the innermost counts. `handled` must outlive
// the scope.
class HandlingScope {
 public:
  explicit HandlingScope(const Event& handled) noexcept;
  ~HandlingScope();
  HandlingScope(const HandlingScope&) = delete;
  HandlingScope& operator=(const HandlingScope&) = delete;

 private:
  const Event* previous_;
};

// The event handled on this thread (the innermost HandlingScope), or nullptr.
const Event* handled_event() noexcept;

// Adds to `event` what it inherits from the handled event (above), keeping every header it
// already has. Does nothing outside a HandlingScope. Every store's append calls it.
void inherit_from_handled(Event& event);

TimePoint now();

// RFC 3339 UTC with microseconds, e.g. 2026-11-22T02:42:48.123456Z.
std::string format_rfc3339(TimePoint t);
std::optional<TimePoint> parse_rfc3339(std::string_view text);

}  // namespace outpost
