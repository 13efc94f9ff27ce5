#include "core/cloudevents.h"

namespace outpost::core {

std::string cloudevents_attribute_name(std::string_view header) {
  std::string out;
  for (char c : header) {
    if (c >= 'A' && c <= 'Z')
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
      out.push_back(c);
  }
  return out;
}

bool reserved_cloudevents_attribute(std::string_view a) {
  return a.empty() || a == "id" || a == "type" || a == "source" || a == "time" ||
         a == "specversion" || a == "partitionkey" || a == "datacontenttype";
}

std::string_view format_event_id(const EventId& id, char (&out)[37]) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto& b = id.bytes();
  std::size_t n = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[n++] = '-';
    out[n++] = kHex[b[i] >> 4];
    out[n++] = kHex[b[i] & 0xF];
  }
  out[n] = '\0';
  return {out, n};
}

std::vector<std::pair<std::string, std::string>> cloudevents_headers(const Event& event,
                                                                     std::string_view source) {
  std::vector<std::pair<std::string, std::string>> h;
  h.reserve(7 + event.headers.size());
  char id[37];
  Rfc3339Formatter time;
  std::string scratch;
  for_each_cloudevents_header(
      event, format_event_id(event.id, id), time, scratch,
      [&h](std::string_view k, std::string_view v) { h.emplace_back(k, v); }, source);
  return h;
}

}  // namespace outpost::core
