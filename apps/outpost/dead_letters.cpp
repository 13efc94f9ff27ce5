#include "dead_letters.h"

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <string>

#include "cli.h"
#include "core/duration.h"
#include "outpost/json.h"

namespace outpost::cli {
namespace {

// One JSON value as text (invalid UTF-8 shown as U+FFFD, as the event encoding does).
template <typename T>
std::string json_text(const T& value) {
  return nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string whole_number_error(std::string_view text, std::size_t low, std::size_t high,
                               std::size_t& out) {
  std::size_t n = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, n);
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || ec != std::errc{} || ptr != end || n < low || n > high)
    return "must be a whole number from " + std::to_string(low) + " to " + std::to_string(high) +
           ", got '" + std::string(text) + "'";
  out = n;
  return {};
}

void add_limit_option(CLI::App* sub, std::size_t& limit, const char* help) {
  // A check on the text as given, in place of the generic integer rule (main.cpp), whose words
  // ("non-negative") would say that 0 is allowed. Like that rule it hands the number on in
  // canonical form: CLI11's own conversion would read '010' as octal.
  sub->add_option("--limit", limit, help)
      ->capture_default_str()
      ->type_name("N")
      ->transform(CLI::Validator(
          [](std::string& text) {
            std::size_t n = 0;
            std::string error = whole_number_error(text, 1, kMaxLimitFlag, n);
            if (error.empty()) text = std::to_string(n);
            return error;
          },
          "1.." + std::to_string(kMaxLimitFlag), "limit"));
}

void add_dead_letter_filter_options(CLI::App* sub, DeadLetterFilterArgs& f, bool dead_letters) {
  sub->add_option("--type", f.type, "Only events of this type (exact)");
  sub->add_option("--key", f.key, "Only events whose key contains this text");
  sub->add_option("--error", f.error,
                  dead_letters ? "Only dead letters whose last error contains this text"
                               : "Not available: Store::list carries no last error");
  sub->add_option("--older-than", f.older_than,
                  dead_letters ? "Only dead letters dead for at least DURATION (500ms, 30s, 5m, "
                                 "12h, 7d)"
                               : "Only events that occurred at least DURATION ago (500ms, 30s, "
                                 "5m, 12h, 7d)")
      ->type_name("DURATION");
}

DeadLetterFilter DeadLetterFilter::from(const DeadLetterFilterArgs& a, std::string_view what) {
  DeadLetterFilter f{
      a.type.value_or(""), a.key.value_or(""), a.error.value_or(""), std::nullopt, {}};
  if (a.older_than) f.older_than = core::parse_duration(*a.older_than, what);
  return f;
}

void DeadLetterFilter::start_clock() {
  if (older_than)
    cutoff = now() - std::chrono::duration_cast<std::chrono::microseconds>(*older_than);
}

bool DeadLetterFilter::matches(std::string_view t, std::string_view k,
                               const std::string* last_error, TimePoint age_from) const {
  return (type.empty() || t == type) && (key.empty() || k.find(key) != std::string_view::npos) &&
         (error.empty() || (last_error && last_error->find(error) != std::string::npos)) &&
         (!older_than || age_from <= cutoff);
}

std::string dead_letter_json(const DeadEvent& e) {
  DeadEvent shown = e;
  shown.last_error = redact(e.last_error);
  return to_json(shown);
}

ConsumerDeadEvent decode_dead_letter(const ConsumerDeadLetter& d) {
  ConsumerDeadEvent out;
  out.row = &d;
  try {
    Event e = event_from_json(d.payload, JsonInput::tolerant);
    DeadEvent dead;
    static_cast<Event&>(dead) = std::move(e);
    dead.attempts = d.attempts;
    dead.last_error = redact(d.error);
    dead.dead_at = d.dead_at;
    out.event = std::move(dead);
  } catch (const std::exception&) {
    // Not an outpost event (a torn or foreign line, parked at once): shown as `raw`. Any
    // exception: one undecodable row must not hide the group's other dead letters.
  }
  return out;
}

std::string dead_letter_json(const ConsumerDeadEvent& c) {
  const ConsumerDeadLetter& d = *c.row;
  const std::string error = redact(d.error);
  const std::string id = d.event_id.empty() ? "null" : json_text(d.event_id);
  std::string out;
  if (c.event) {
    out = to_json(*c.event);
    // to_json writes the nil UUID for a message that carried no id; this shape says null. The
    // id follows the headers object, so `},"id":"` is its first structural occurrence.
    if (c.event->id.is_nil()) {
      const std::string nil = "},\"id\":\"" + EventId().str() + "\"";
      if (auto at = out.find(nil); at != std::string::npos)
        out.replace(at, nil.size(), "},\"id\":null");
    }
    out.pop_back();  // the closing brace: the consumer's fields follow
  } else {
    out = "{\"attempts\":" + std::to_string(d.attempts) + ",\"dead_at\":\"" +
          format_rfc3339(d.dead_at) + "\",\"id\":" + id + ",\"key\":" + json_text(d.key) +
          ",\"last_error\":" + json_text(error) + ",\"raw\":" + json_text(d.payload);
  }
  out += ",\"row\":" + std::to_string(d.id) + ",\"group\":" + json_text(d.group) +
         ",\"position\":" + json_text(d.position) + ",\"state\":" + json_text(d.state) +
         ",\"event_id\":" + json_text(d.event_id) + ",\"error\":" + json_text(error) + "}";
  return out;
}

}  // namespace outpost::cli
