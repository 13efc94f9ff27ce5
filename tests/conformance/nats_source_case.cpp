// Registers NATS JetStream with the Source conformance suite: a fresh stream per test on
// OUTPOST_TEST_NATS_URL's server (created by the NATS sink), read by the nats source from the
// same subject and stream; cleanup deletes the stream.

#include "../integration/broker_consumers.h"
#include "outpost/sinks/nats.h"
#include "source_cases.h"

namespace outpost::testing {
namespace {

using namespace brokers;

const bool registered = register_source_case({
    .name = "nats",
    .scheme = "nats",
    .unavailable_reason = [] { return source_unavailable("nats", "OUTPOST_TEST_NATS_URL"); },
    .make =
        [] {
          const std::string server = env_text("OUTPOST_TEST_NATS_URL");
          std::string stream = brokers::unique_name("SRCCONF");
          for (auto& c : stream)
            if (c == '-') c = '_';
          const std::string subject = brokers::unique_name("srcconf") + ".events";
          return SourceFixture{
              .sink = open_nats_sink(server + "/" + subject + "?stream=" + stream + "&create=1"),
              .url = server + "/" + subject + "?stream=" + stream,
              .cleanup = [server, stream] { nats_delete_stream(server, stream); },
              // Another server list, tuning and the sink's own parameters.
              .same_log = {"nats://nats.example:4999," + server.substr(server.find("://") + 3) +
                               "/" + subject + "?stream=" + stream,
                           server + "/" + subject + "?stream=" + stream + "&timeout_ms=5000",
                           server + "/" + subject + "?stream=" + stream + "&create=1"},
              .other_logs = {server + "/" + subject + "?stream=" + stream + "X",
                             server + "/" + subject + ".more?stream=" + stream},
          };
        },
});

}  // namespace
}  // namespace outpost::testing
