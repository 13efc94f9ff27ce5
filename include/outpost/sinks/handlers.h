#pragma once
// The handler-table sink: delivers events to in-process functions, one handler per event type.
// The Bus uses it; it can also be given to a Relay directly:
//
//   outpost::HandlerSink sink({.concurrency = 4});
//   sink.on("user.created", [](const outpost::StoredEvent& e) { ... });  // throw to fail
//   outpost::Relay relay(*store, sink);
//   relay.run();
//
// Outcomes (HandlerSink::classify; docs/sinks.md, "Failure classes (handlers)"): a handler
// that returns is `delivered`. One that throws outpost::UnavailableError (or a subclass) says
// its downstream is down or busy: `unavailable` ("unavailable: <what()>", with its
// retry_after), no attempt is counted, the relay pauses the sink, and no further event of the
// batch is started. Any other exception is refused: `failed` with its what() as the error, word
// for word (a fixed text for non-std exceptions), an attempt. An event whose type has no handler is
// `failed` with an error naming the type (so it ends in the dead letters) unless
// ignore_unknown_types, then it is `delivered` unhandled. A handle middleware returning false drops
// the event: `delivered` without running the handler; one that throws is classified like a handler.
//
// Concurrency: a persistent pool of N threads (N = concurrency) runs the batch while the calling
// thread waits; events are grouped into lanes by key (an empty key is a lane of its own), each
// lane runs in order on one thread at a time, and once an event of a lane fails its later events
// are `skipped`. Handlers see a copy of the event that lives as long as the handler runs.
//
// Thread safety: on/off/use may be called from any thread at any time (a batch sees the table as
// it was when deliver() started); deliver() is called by one relay thread at a time.

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/sink.h"

namespace outpost {

// Throws to fail the delivery: the exception text becomes the nack's error. Throw
// outpost::UnavailableError (outpost/error.h) when what the handler calls is down or busy.
using Handler = std::function<void(const StoredEvent&)>;
// May inspect the event before its handler; return false to drop it (it is acked unhandled).
using HandleMiddleware = std::function<bool(const StoredEvent&)>;

struct HandlerSinkOptions {
  std::size_t concurrency = 1;        // handler threads (>= 1); 1 runs inline on the relay thread
  bool ignore_unknown_types = false;  // false: an event with no handler fails (-> dead letter)
  // Called after a handler returned for an event (not for dropped or unknown events, nor for a
  // handler that returned after its call gave up on it). May run on any handler thread, one at a
  // time. Must not throw.
  std::function<void(const StoredEvent&)> on_handled = nullptr;
};

class HandlerSink final : public Sink {
 public:
  explicit HandlerSink(HandlerSinkOptions options = {});
  ~HandlerSink() override;
  HandlerSink(const HandlerSink&) = delete;
  HandlerSink& operator=(const HandlerSink&) = delete;

  std::string_view name() const override { return "handlers"; }

  // One handler per type: a second on() for the same type throws Error(ErrorCode::conflict).
  // An empty type or an empty handler is a ConfigError.
  void on(const std::string& type, Handler handler);
  // Removes the handler for `type` (no-op when there is none).
  void off(const std::string& type);
  // Middlewares run in registration order before the handler.
  void use(HandleMiddleware middleware);

  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override;
  // Past the control's deadline the handlers still running fail with its "timed out" error;
  // when stopping, no further handler starts and, past the abandon time, those running are
  // `skipped`. Either way their threads are abandoned (replaced in the pool), and until such a
  // handler returns, events of its key fail at once instead of running beside it.
  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl& control) override;
  void close() override;

  // The outcome of a handler (or handle middleware) that threw `thrown` for an event of `type`:
  // UnavailableError -> unavailable with its retry_after, anything else -> failed (refused).
  static DeliveryResult classify(std::exception_ptr thrown, std::string_view type);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outpost
