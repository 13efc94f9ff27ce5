#include "core/headers_json.h"

#include <nlohmann/json.hpp>

namespace outpost::core {

std::string headers_to_json(const Headers& headers) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : headers) j[k] = v;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<Headers> headers_from_json(std::string_view json) {
  auto j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  Headers h;
  for (auto& [k, v] : j.items()) h.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
  return h;
}

}  // namespace outpost::core
