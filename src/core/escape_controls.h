#pragma once
// Text from outside (event types, a webhook's error body, a broker's message, a config key) made
// safe to print on one line of a log or an error message (docs/operations.md, "Logs").

#include <string>

namespace outpost {

// `text` with its control characters escaped (\n, \r, \t, \xHH, C1 as \u0080-\u009f, a byte
// that is not UTF-8 as \xHH).
std::string escape_controls(const std::string& text);

}  // namespace outpost
