// Issue 20 item 2: the W3C trace context is checked at emit and mapped to the standard header
// names, and an event emitted while another is handled inherits its causal chain
// (correlation_id, causation_id, traceparent/tracestate) on every store, through the Bus and
// through a store's append called from a handler.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cloudevents.h"
#include "outpost/bus.h"
#include "outpost/error.h"
#include "outpost/event.h"
#include "outpost/sinks/handlers.h"
#include "store_param.h"

namespace outpost::unit {
namespace {

constexpr const char* kParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string problem_of(const Headers& h) {
  return trace_context_problem(h);
}

TEST(TraceContext, WellFormedTraceContextPasses) {
  EXPECT_EQ(problem_of({}), "");
  EXPECT_EQ(problem_of({{"traceparent", kParent}}), "");
  EXPECT_EQ(problem_of({{"traceparent", kParent}, {"tracestate", "rojo=00f067aa0ba902b7"}}), "");
  EXPECT_EQ(problem_of({{"traceparent", kParent},
                        {"tracestate", "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE,"}}),
            "");
  // A later version may carry more after the flags (W3C: parse what version 00 defines).
  EXPECT_EQ(problem_of({{"traceparent", std::string("01") + (kParent + 2) + "-what-comes"}}), "");
  EXPECT_EQ(problem_of({{"correlation_id", "anything"}, {"TRACE", "x"}}), "");
}

TEST(TraceContext, MalformedTraceContextIsNamedWithWhatIsWrong) {
  struct Case {
    Headers headers;
    std::string names;
  };
  const std::string p = kParent;
  const std::vector<Case> cases{
      {{{"traceparent", "00-abc-def-01"}}, "is not VERSION-TRACEID-PARENTID-FLAGS"},
      {{{"traceparent", ""}}, "is not VERSION-TRACEID-PARENTID-FLAGS"},
      {{{"traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}},
       "not lowercase hex"},
      {{{"traceparent", "ff" + p.substr(2)}}, "invalid version ff"},
      {{{"traceparent", p + "-x"}}, "version 00 has exactly 55"},
      {{{"traceparent", "01" + p.substr(2) + "x"}}, "no '-' after its flags"},
      {{{"traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}},
       "all-zero trace id"},
      {{{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}},
       "all-zero parent id"},
      {{{"traceparent", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
       "is not VERSION"},
      {{{"tracestate", "rojo=1"}}, "without a 'traceparent'"},
      {{{"traceparent", p}, {"tracestate", "rojo"}}, "'rojo', which is not KEY=VALUE"},
      {{{"traceparent", p}, {"tracestate", "ro\x01jo=1"}}, "not printable ASCII"},
      {{{"traceparent", p}, {"tracestate", std::string(513, 'a')}}, "over 512"},
      {{{"Traceparent", p}}, "write the trace context header as 'traceparent'"},
      {{{"TRACESTATE", "a=1"}, {"traceparent", p}}, "as 'tracestate'"},
  };
  for (const auto& c : cases) {
    const std::string got = problem_of(c.headers);
    EXPECT_NE(got.find(c.names), std::string::npos) << "got: " << got;
    EXPECT_NE(got.find("header '"), std::string::npos) << got;
    Event e = Event::make("t", "{}");
    e.headers = c.headers;
    EXPECT_THROW(check_trace_context(e, "emit"), ConfigError) << got;
  }
  Event e = Event::make("t", "{}");
  e.headers["traceparent"] = "00-abc";
  try {
    check_trace_context(e, "stdin line 3");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& err) {
    EXPECT_EQ(std::string(err.what()).rfind("stdin line 3: header 'traceparent' ", 0), 0u)
        << err.what();
    EXPECT_NE(std::string(err.what()).find("got '00-abc'"), std::string::npos) << err.what();
  }
}

// Kafka, NATS and HTTP send the mapping: the standard names right after their CloudEvents
// extension attribute (which carries the same value, as the CloudEvents distributed tracing
// extension says for a single hop).
TEST(TraceContext, CloudEventsMappingAddsTheStandardHeaders) {
  Event e = Event::make("t", "{}", "k");
  e.headers["traceparent"] = kParent;
  e.headers["tracestate"] = "rojo=1, congo=2";
  e.headers["tenant"] = "acme";
  auto h = core::cloudevents_headers(e);
  std::vector<std::string> names;
  for (const auto& [k, v] : h) names.push_back(k);
  auto at = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) - names.begin();
  };
  ASSERT_LT(at("traceparent"), static_cast<long>(names.size()));
  ASSERT_LT(at("tracestate"), static_cast<long>(names.size()));
  EXPECT_EQ(at("traceparent"), at("ce-traceparent") + 1);
  EXPECT_EQ(at("tracestate"), at("ce-tracestate") + 1);
  EXPECT_EQ(h[at("traceparent")].second, kParent);
  EXPECT_EQ(h[at("tracestate")].second, "rojo=1, congo=2");
  EXPECT_EQ(at("tenant"), static_cast<long>(names.size())) << "only the trace context";
  EXPECT_EQ(std::count(names.begin(), names.end(), "traceparent"), 1);
}

TEST(TraceContext, AnEventEmittedWhileHandlingInheritsTheCausalChain) {
  Event none = Event::make("t", "{}");
  inherit_from_handled(none);  // no scope: nothing added
  EXPECT_TRUE(none.headers.empty());
  EXPECT_EQ(handled_event(), nullptr);

  Event first = Event::make("order.placed", "{}");  // no correlation id: the chain starts here
  first.headers["traceparent"] = kParent;
  first.headers["tracestate"] = "rojo=1";
  {
    const HandlingScope scope(first);
    EXPECT_EQ(handled_event(), &first);
    Event next = Event::make("payment.requested", "{}");
    inherit_from_handled(next);
    EXPECT_EQ(next.headers.at("correlation_id"), first.id.str());
    EXPECT_EQ(next.headers.at("causation_id"), first.id.str());
    EXPECT_EQ(next.headers.at("traceparent"), kParent);
    EXPECT_EQ(next.headers.at("tracestate"), "rojo=1");

    Event second = Event::make("payment.taken", "{}");
    second.headers["correlation_id"] = "conv-7";
    {
      const HandlingScope inner(second);  // nests: the innermost counts
      Event third = Event::make("receipt.sent", "{}");
      third.headers["causation_id"] = "given";
      third.headers["traceparent"] = "00-11111111111111111111111111111111-2222222222222222-00";
      inherit_from_handled(third);
      EXPECT_EQ(third.headers.at("correlation_id"), "conv-7");
      EXPECT_EQ(third.headers.at("causation_id"), "given") << "a header given is kept";
      EXPECT_EQ(third.headers.at("traceparent"),
                "00-11111111111111111111111111111111-2222222222222222-00");
      EXPECT_FALSE(third.headers.contains("tracestate")) << "the trace goes on only as a whole";
    }
    EXPECT_EQ(handled_event(), &first);
  }
  EXPECT_EQ(handled_event(), nullptr);
}

class TraceContextStore : public StoreParamTest {
 protected:
  static BusOptions fast_options() {
    BusOptions o;
    o.relay.poll_interval = 50ms;
    o.relay.backoff_base = 1ms;
    o.relay.backoff_max = 4ms;
    return o;
  }
};

// A Bus handler (concurrency 1: on the relay thread; 4: on the pool's threads) emits follow-up
// events with Bus::emit and with the store's own append: both carry the handled event's
// correlation id, its id as causation id and its traceparent.
TEST_P(TraceContextStore, BusHandlersEmitFollowUpsThatCarryTheChain) {
  for (std::size_t concurrency : {1u, 4u}) {
    BusOptions o = fast_options();
    o.concurrency = concurrency;
    auto store = make_store();
    Bus bus(store, o);
    std::mutex mu;
    std::map<std::string, StoredEvent> seen;  // by type
    bus.on("order.placed", [&](const StoredEvent&) {
      bus.emit(Event::make("payment.requested", "{}", "k"));
      store->append(std::vector<Event>{Event::make("stock.reserved", "{}", "k")});
    });
    for (const char* type : {"payment.requested", "stock.reserved"})
      bus.on(type, [&](const StoredEvent& e) {
        std::lock_guard lock(mu);
        seen.emplace(e.type, e);
      });
    bus.start();
    Event placed = Event::make("order.placed", "{}", "k");
    placed.headers["correlation_id"] = "checkout-9";
    placed.headers["traceparent"] = kParent;
    bus.emit(placed);
    ASSERT_TRUE(eventually(
        [&] {
          std::lock_guard lock(mu);
          return seen.size() == 2;
        },
        10000ms))
        << "concurrency " << concurrency;
    bus.stop();
    for (const auto& [type, e] : seen) {
      EXPECT_EQ(e.headers.at("correlation_id"), "checkout-9") << type;
      EXPECT_EQ(e.headers.at("causation_id"), placed.id.str()) << type;
      EXPECT_EQ(e.headers.at("traceparent"), kParent) << type;
    }
  }
}

TEST_P(TraceContextStore, BusEmitRefusesAMalformedTraceparentAndWritesNothing) {
  auto store = make_store();
  Bus bus(store, fast_options());
  Event e = Event::make("t", "{}");
  e.headers["traceparent"] = "00-not-a-trace-01";
  try {
    bus.emit(e);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("Bus::emit: header 'traceparent'"), std::string::npos)
        << err.what();
  }
  std::vector<Event> two{Event::make("t", "{}"), e};
  try {
    bus.emit_many(two);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("Bus::emit_many: event 1: header 'traceparent'"),
              std::string::npos)
        << err.what();
  }
  // A middleware that sets a trace context is what is checked.
  bus.use_emit([](Event& ev) {
    ev.headers["traceparent"] = kParent;
    return true;
  });
  EXPECT_NO_THROW(bus.emit(e));
  EXPECT_EQ(store->stats().pending, 1);
}

INSTANTIATE_TEST_SUITE_P(Stores, TraceContextStore, ::testing::ValuesIn(testing::store_cases()),
                         case_name);

}  // namespace
}  // namespace outpost::unit
