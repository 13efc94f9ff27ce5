// The in-process bus: a store, a handler sink and a relay on its own thread.

#include "outpost/bus.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "outpost/error.h"

namespace outpost {

struct Bus::Impl {
  Impl(std::shared_ptr<Store> s, BusOptions o)
      : store(std::move(s)),
        options(std::move(o)),
        sink(HandlerSinkOptions{
            .concurrency = options.concurrency,
            .ignore_unknown_types = options.ignore_unknown_types,
            .on_handled = [this](const StoredEvent& e) { record_handled(e); },
        }),
        emit_middlewares(std::make_shared<const std::vector<EmitMiddleware>>()) {}

  ~Impl() { stop(); }

  void report(const std::string& message, const StoredEvent* event) {
    if (!options.on_error) return;
    try {
      options.on_error(message, event);
    } catch (...) {  // documented as must-not-throw
    }
  }

  // wait_for() needs the first handled event of each type since start(); after that a type
  // costs one lookup per event.
  void record_handled(const StoredEvent& e) {
    std::lock_guard lock(handled_mu);
    if (handled.contains(e.type)) return;
    handled.emplace(e.type, e);
    handled_cv.notify_all();
  }

  std::shared_ptr<const std::vector<EmitMiddleware>> emit_snapshot() {
    std::lock_guard lock(emit_mu);
    return emit_middlewares;
  }

  void start() {
    std::lock_guard lock(run_mu);
    if (relay) return;
    {
      std::lock_guard hl(handled_mu);
      handled.clear();
    }
    RelayOptions ro = options.relay;
    auto user_error = ro.on_error;
    auto user_delivery_error = ro.on_delivery_error;
    ro.on_error = [this, user_error](const std::string& m) {
      if (user_error) user_error(m);
      report(m, nullptr);
    };
    ro.on_delivery_error = [this, user_error, user_delivery_error](const std::string& m,
                                                                   const StoredEvent& e) {
      if (user_delivery_error)
        user_delivery_error(m, e);
      else if (user_error)
        user_error(m);
      report(m, &e);
    };
    relay = std::make_unique<Relay>(*store, sink, std::move(ro));
    Relay* r = relay.get();
    thread = std::thread([this, r] {
      try {
        r->run();
      } catch (const std::exception& ex) {
        report(std::string("relay stopped: ") + ex.what(), nullptr);
      } catch (...) {
        report("relay stopped by an unknown exception", nullptr);
      }
    });
  }

  void stop() {
    std::lock_guard lock(run_mu);
    if (!relay) return;
    relay->stop();
    thread.join();
    last_counters = relay->counters();
    relay.reset();
  }

  std::shared_ptr<Store> store;
  const BusOptions options;
  HandlerSink sink;

  std::mutex emit_mu;
  std::shared_ptr<const std::vector<EmitMiddleware>> emit_middlewares;  // guarded by emit_mu

  std::mutex handled_mu;
  std::condition_variable handled_cv;
  std::unordered_map<std::string, StoredEvent> handled;  // guarded by handled_mu

  std::mutex run_mu;
  std::unique_ptr<Relay> relay;  // guarded by run_mu; set while started
  std::thread thread;            // guarded by run_mu
  RelayCounters last_counters;   // guarded by run_mu; of the last relay after stop()
};

namespace {
std::shared_ptr<Store> require_store(std::shared_ptr<Store> store) {
  if (!store) throw ConfigError("Bus needs a store (got a null pointer)");
  return store;
}
}  // namespace

Bus::Bus(std::shared_ptr<Store> store, BusOptions options)
    : impl_(std::make_unique<Impl>(require_store(std::move(store)), std::move(options))) {}

Bus::~Bus() = default;  // Impl's destructor stops the relay before the sink goes away

// An event emitted from a handler takes its causal chain from the handled event before the
// middlewares see it (outpost/event.h, HandlingScope); what the middlewares leave must carry a
// well-formed trace context (docs/sinks.md, "Trace context").
void Bus::emit(Event event, TxHandle tx) {
  inherit_from_handled(event);
  auto mws = impl_->emit_snapshot();
  for (const auto& mw : *mws)
    if (!mw(event)) return;
  check_trace_context(event, "Bus::emit");
  impl_->store->append(std::span<const Event>(&event, 1), tx);
}

void Bus::emit_many(std::vector<Event> events, TxHandle tx) {
  for (auto& e : events) inherit_from_handled(e);
  auto mws = impl_->emit_snapshot();
  if (!mws->empty()) {
    std::erase_if(events, [&](Event& e) {
      for (const auto& mw : *mws)
        if (!mw(e)) return true;
      return false;
    });
  }
  if (events.empty()) return;
  for (std::size_t i = 0; i < events.size(); ++i)
    if (auto p = trace_context_problem(events[i].headers); !p.empty())
      throw ConfigError("Bus::emit_many: event " + std::to_string(i) + ": " + p);
  impl_->store->append(events, tx);
}

void Bus::on(const std::string& type, Handler handler) {
  impl_->sink.on(type, std::move(handler));
}
void Bus::off(const std::string& type) {
  impl_->sink.off(type);
}
void Bus::use_handle(HandleMiddleware middleware) {
  impl_->sink.use(std::move(middleware));
}

void Bus::use_emit(EmitMiddleware middleware) {
  if (!middleware) throw ConfigError("emit middleware is empty");
  std::lock_guard lock(impl_->emit_mu);
  auto next = std::make_shared<std::vector<EmitMiddleware>>(*impl_->emit_middlewares);
  next->push_back(std::move(middleware));
  impl_->emit_middlewares = std::move(next);
}

void Bus::start() {
  impl_->start();
}
void Bus::stop() {
  impl_->stop();
}

std::optional<StoredEvent> Bus::wait_for(const std::string& type, Duration timeout) {
  std::unique_lock lock(impl_->handled_mu);
  if (!impl_->handled_cv.wait_for(lock, timeout, [&] { return impl_->handled.contains(type); }))
    return std::nullopt;
  return impl_->handled.at(type);
}

Store& Bus::store() {
  return *impl_->store;
}

RelayCounters Bus::counters() const {
  std::lock_guard lock(impl_->run_mu);
  return impl_->relay ? impl_->relay->counters() : impl_->last_counters;
}

}  // namespace outpost
