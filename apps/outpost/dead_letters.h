#pragma once
// Dead letters as operators see them, one shape and one filter for a store's dead letters
// (`outpost events dead`, the dashboard's /api/dead) and a consumer group's (`outpost consumers
// dead`, /api/consumer/dead); docs/cli.md, "Dead letters".
//
// The shape is the event (the JSON encoding of outpost/json.h: id, type, key, payload, headers,
// occurred_at) plus attempts, last_error (redacted) and dead_at. A consumer group's dead letter
// stores the message as read (the event's JSON encoding); it is decoded here and shown as that
// event, with the consumer's fields after it: row (the row id), group, position, state, and
// event_id and error (the names of earlier versions: the same as id and last_error). A message
// that is not an outpost event has no type, payload or headers, but `raw`: the message as read.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "outpost/consumer.h"
#include "outpost/event.h"

namespace CLI {
class App;
}

namespace outpost::cli {

// What the operator asked for: --type (exact), --key and --error (substrings), --older-than.
// Texts as given; std::nullopt: not given (an empty text is given: `--older-than ''` is an error).
struct DeadLetterFilterArgs {
  std::optional<std::string> type, key, error, older_than;
  bool given() const { return type || key || error || older_than; }
};

// The one rule for how many entries a listing shows or skips (docs/cli.md, "Integer flags"):
// `--limit` of `events list|dead|blocked|leased|archive` and `consumers dead` (1 to
// kMaxLimitFlag), the dashboard's `limit=` and `offset=` (docs/dashboard.md): decimal digits
// only, within [low, high]. There is no "0 = unlimited": 0 is refused like any number out of
// range. Returns "" and sets `out` when `text` is such a number, else the reason naming the
// range, "must be a whole number from 1 to 100000000, got '0'".
std::string whole_number_error(std::string_view text, std::size_t low, std::size_t high,
                               std::size_t& out);
inline constexpr std::size_t kMaxLimitFlag = 100'000'000;
// `--limit` on `sub` (default `limit` as it is), under that rule.
void add_limit_option(CLI::App* sub, std::size_t& limit, const char* help);

// --type --key --error --older-than on `sub`, bound to `f`. `dead_letters` false: the options of
// a list of undelivered events (no last error; age from occurred_at).
void add_dead_letter_filter_options(CLI::App* sub, DeadLetterFilterArgs& f, bool dead_letters);

struct DeadLetterFilter {
  std::string type, key, error;
  std::optional<Duration> older_than;
  TimePoint cutoff{};  // older_than: what died (or occurred) at or before this matches

  // Parses older_than (ConfigError naming it as `what`); call before anything is opened.
  static DeadLetterFilter from(const DeadLetterFilterArgs& a,
                               std::string_view what = "--older-than");
  // Sets the age cutoff from this host's clock; call just before the dead letters are read.
  void start_clock();
  // `last_error` null: the entry carries none (an undelivered event), so --error cannot match.
  bool matches(std::string_view type, std::string_view key, const std::string* last_error,
               TimePoint age_from) const;
  bool matches(const DeadEvent& e) const {
    return matches(e.type, e.key, &e.last_error, e.dead_at);
  }
  bool empty() const { return type.empty() && key.empty() && error.empty() && !older_than; }
};

// A store's dead letter: to_json(DeadEvent) with its last error redacted. One line.
std::string dead_letter_json(const DeadEvent& e);

// A consumer group's dead letter decoded into the event it carries.
struct ConsumerDeadEvent {
  const ConsumerDeadLetter* row = nullptr;
  std::optional<DeadEvent> event;  // nullopt: not an outpost event (row->payload is shown as raw)
  std::string_view type() const { return event ? std::string_view(event->type) : ""; }
  bool matches(const DeadLetterFilter& f) const {
    return f.matches(type(), row->key, &row->error, row->dead_at);
  }
};
ConsumerDeadEvent decode_dead_letter(const ConsumerDeadLetter& d);
// The shape above, one line; the payload's text as stored (numbers keep every digit).
std::string dead_letter_json(const ConsumerDeadEvent& d);

}  // namespace outpost::cli
