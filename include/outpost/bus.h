#pragma once
// The in-process bus: the user's API. Wraps a store; emit() writes events in the caller's
// transaction, on() registers one handler per event type, start() runs a relay that delivers
// to the handlers (at least once, in order per key).
//
//   auto bus = outpost::Bus(outpost::open_store("sqlite:app.db"));
//   bus.on("user.created", [](const outpost::StoredEvent& e) { ... });
//   bus.start();
//   sqlite3_exec(db, "BEGIN IMMEDIATE", ...);  ... business writes ...
//   bus.emit(outpost::Event::make("user.created", R"({"id":1})", "user-1"),
//            outpost::TxHandle::sqlite(db));
//   sqlite3_exec(db, "COMMIT", ...);
//
// Thread safety: all methods may be called from any thread.

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "outpost/relay.h"
#include "outpost/sinks/handlers.h"
#include "outpost/store.h"

namespace outpost {

// Handler and HandleMiddleware are declared in outpost/sinks/handlers.h.
// May change the event (add headers); return false to drop it (it is not written).
using EmitMiddleware = std::function<bool(Event&)>;

struct BusOptions {
  RelayOptions relay;
  std::size_t concurrency = 1;        // handler threads; events of one key never run concurrently
  bool ignore_unknown_types = false;  // false: an event with no handler is nacked (-> dead letter)
  // Called when a handler fails or the relay hits a store error. Must not throw.
  std::function<void(const std::string& message, const StoredEvent* event)> on_error;
};

class Bus {
 public:
  explicit Bus(std::shared_ptr<Store> store, BusOptions options = {});
  ~Bus();  // stops
  Bus(const Bus&) = delete;
  Bus& operator=(const Bus&) = delete;

  void emit(Event event, TxHandle tx = {});
  void emit_many(std::vector<Event> events, TxHandle tx = {});

  // One handler per type: a second on() for the same type throws (ErrorCode::conflict).
  void on(const std::string& type, Handler handler);
  void off(const std::string& type);
  void use_emit(EmitMiddleware middleware);
  void use_handle(HandleMiddleware middleware);

  void start();  // starts the relay thread
  // Stops the relay (Relay::stop()): handlers running get up to relay.deliver_timeout (the lease
  // by default) or relay.drain_timeout; one that never returns is abandoned, not waited for.
  void stop();

  // For tests: waits until an event of `type` has been handled (successfully) after this call
  // or earlier since start(); returns it, or nullopt on timeout.
  std::optional<StoredEvent> wait_for(const std::string& type, Duration timeout);

  Store& store();
  RelayCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outpost
