#pragma once
// Messages of every source are the DESIGN §6 JSON encoding of an event (the file sink's lines,
// the JSON a broker source builds from an entry's fields); one decoder for all of them.

#include <string>

#include "outpost/consumer.h"

namespace outpost::consume {

// Never throws: a message that is not an outpost event gets `parse_error` set.
Message decode_message(std::string raw, std::string position);

}  // namespace outpost::consume
