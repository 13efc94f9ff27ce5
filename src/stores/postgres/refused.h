#pragma once
// Values PostgreSQL refuses, said in outpost's words. The core checks (core::prepare_for_append)
// refuse bad input before any store sees it; whatever they let through that PostgreSQL still
// refuses must not reach the user as a backend error about index rows and parameter numbers.

#include <span>
#include <string>
#include <string_view>

#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::pg {

// `bytes` as PostgreSQL text: each byte of an invalid UTF-8 sequence, and NUL (which text cannot
// hold), becomes U+FFFD.
std::string as_text(std::string_view bytes);

// When `e`, thrown by the outbox INSERT of `events`, is PostgreSQL refusing one of their values,
// throws an error naming the event and the field instead (ConfigError: fix the input; for a
// duplicate id Error(conflict) naming the id). Returns otherwise.
void throw_if_refused_value(const Error& e, std::span<const Event> events);

}  // namespace outpost::pg
