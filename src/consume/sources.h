#pragma once
// Constructors of the sources open_source() dispatches to by scheme.

#include <memory>

#include "core/url.h"
#include "outpost/consumer.h"

namespace outpost::consume {

std::unique_ptr<Source> open_file_source(const core::Url& url);
// Defined only when hiredis was found (OUTPOST_CONSUME_HAVE_REDIS).
std::unique_ptr<Source> open_redis_stream_source(const core::Url& url);
// Defined only when librdkafka was found (OUTPOST_CONSUME_HAVE_KAFKA).
std::unique_ptr<Source> open_kafka_source(const core::Url& url);
// Defined only when cnats was found (OUTPOST_CONSUME_HAVE_NATS).
std::unique_ptr<Source> open_nats_source(const core::Url& url);

}  // namespace outpost::consume
