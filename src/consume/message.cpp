#include "consume/message.h"

#include "outpost/error.h"
#include "outpost/json.h"

namespace outpost::consume {

Message decode_message(std::string raw, std::string position) {
  Message m;
  m.position = std::move(position);
  try {
    Event e = event_from_json(raw);
    static_cast<Event&>(m.event) = std::move(e);
  } catch (const Error& e) {
    m.parse_error = std::string("not an outpost event: ") + e.what();
  }
  m.raw = std::move(raw);
  return m;
}

}  // namespace outpost::consume
