#pragma once
// The warning the Redis store and the redis-stream:// sink print at open when the server may
// lose what it acknowledged (docs/redis.md, "Durability"): a maxmemory-policy other than
// noeviction can evict outbox keys or stream entries under memory pressure, and a server with
// neither AOF nor RDB save points loses everything on a restart. Managed Redis often disables
// CONFIG: then nothing is said (the settings cannot be read, and a warning on every start that
// cannot be acted on would teach users to ignore warnings).

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace outpost::redis_store {

// `config_get(name)`: the value of CONFIG GET name, nullopt when the server refused CONFIG or
// did not answer. Returns what is wrong, in one line ("" when nothing is, or CONFIG is refused).
inline std::string durability_problems(
    const std::function<std::optional<std::string>(const char*)>& config_get) {
  const auto policy = config_get("maxmemory-policy");
  if (!policy) return {};
  std::string problems;
  if (*policy != "noeviction")
    problems = "maxmemory-policy is " + *policy +
               ", not noeviction (under memory pressure the server may evict keys and lose "
               "events)";
  const auto aof = config_get("appendonly");
  const auto save = config_get("save");
  if (aof && save && *aof == "no" && save->find_first_not_of(' ') == std::string::npos) {
    if (!problems.empty()) problems += "; ";
    problems +=
        "persistence is off (appendonly no and no save points: a restart of the server loses "
        "every event it holds)";
  }
  return problems;
}

// The warning line for `what` ("redis store {prefix} at 127.0.0.1:6379"), "" for no problems.
inline std::string durability_warning(std::string_view what, const std::string& problems) {
  if (problems.empty()) return {};
  return "outpost: warning: " + std::string(what) + ": " + problems +
         " (docs/redis.md, Durability)\n";
}

}  // namespace outpost::redis_store
