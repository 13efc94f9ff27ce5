#pragma once
// Messages of every source are events in the JSON encoding of docs/cli.md (the file sink's lines,
// the JSON a broker source builds from an entry's fields); one decoder for all of them.

#include <functional>
#include <string>
#include <string_view>

#include "outpost/consumer.h"

namespace outpost::consume {

// Never throws: a message that is not an outpost event gets `parse_error` set.
Message decode_message(std::string raw, std::string position);

// The broker sinks send an event as CloudEvents binary-mode headers (core/cloudevents.h) with
// the payload as the body; the Kafka and NATS sources read it back through these two, so both
// map every header the same way. Call apply_cloudevents_header for each header of the message
// (the event id text collects in `id_text`: `outpost-id` wins over `ce-id`), then
// finish_cloudevents_message, which sets the id and `parse_error` (`where()` names the message;
// called only then, so a message that is an event costs no text).
// `raw` stays empty: encoding every message only for the rare dead letter cost a third of a
// broker source's read time; dead_letter_payload encodes it when a message is parked.
void apply_cloudevents_header(Message& m, std::string_view name, std::string_view value,
                              std::string& id_text);
void finish_cloudevents_message(Message& m, const std::string& id_text,
                                const std::function<std::string()>& where);

// What a dead letter keeps of `m`: the message as read (a JSON line), or the event's JSON
// (docs/cli.md) for messages a broker source rebuilt from fields and headers.
std::string dead_letter_payload(const Message& m);

}  // namespace outpost::consume
