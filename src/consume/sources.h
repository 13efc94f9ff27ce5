#pragma once
// Constructors of the sources open_source() opens: file: here, the broker sources beside their
// sinks (src/sinks/<backend>/<backend>_source.cpp), registered with the factory by scheme.

#include <memory>
#include <string_view>

#include "core/url.h"
#include "outpost/consumer.h"

namespace outpost::consume {

std::unique_ptr<Source> open_file_source(const core::Url& url);
// In outpost::redis_stream_source, outpost::kafka_source, outpost::nats_source.
std::unique_ptr<Source> open_redis_stream_source(std::string_view url);
std::unique_ptr<Source> open_kafka_source(std::string_view url);
std::unique_ptr<Source> open_nats_source(std::string_view url);

}  // namespace outpost::consume
