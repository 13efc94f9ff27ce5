#pragma once
// Stores that live inside one process (`memory:`, `sqlite::memory:`): nothing but that process
// can emit into them and their events are gone when it exits. `outpost emit` (a process of its
// own) and a daemon's [[relay]] (fed by other processes) refuse them, exit 2 (docs/cli.md, "emit";
// docs/operations.md), as `outpost schema` does.

#include <cctype>
#include <string>
#include <string_view>

namespace outpost::cli {

// "the memory store" / "an in-memory SQLite database" when `url` names one; "" otherwise.
inline std::string in_process_store(std::string_view url) {
  std::string lower;
  for (char c : url.substr(0, url.find('?')))
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.rfind("memory:", 0) == 0) return "the memory store";
  if (lower == "sqlite::memory:") return "an in-memory SQLite database";
  return "";
}

}  // namespace outpost::cli
