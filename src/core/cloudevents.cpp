#include "core/cloudevents.h"

namespace outpost::core {

std::string cloudevents_attribute_name(std::string_view header) {
  std::string out;
  for (char c : header) {
    if (c >= 'A' && c <= 'Z') out.push_back(static_cast<char>(c - 'A' + 'a'));
    else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) out.push_back(c);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> cloudevents_headers(const Event& event,
                                                                     std::string_view source) {
  std::vector<std::pair<std::string, std::string>> h;
  h.reserve(6 + event.headers.size());
  h.emplace_back("ce-specversion", "1.0");
  h.emplace_back("ce-id", event.id.str());
  h.emplace_back("ce-type", event.type);
  h.emplace_back("ce-source", std::string(source));
  h.emplace_back("ce-time", format_rfc3339(event.occurred_at));
  if (!event.key.empty()) h.emplace_back("ce-partitionkey", event.key);
  for (const auto& [name, value] : event.headers) {
    std::string attr = cloudevents_attribute_name(name);
    if (attr.empty() || attr == "id" || attr == "type" || attr == "source" || attr == "time" ||
        attr == "specversion" || attr == "partitionkey")
      continue;  // never let a user header overwrite a required attribute
    h.emplace_back("ce-" + attr, value);
  }
  return h;
}

}  // namespace outpost::core
