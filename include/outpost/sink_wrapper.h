#pragma once
// SinkWrapper: a Sink that forwards every call to another Sink (the idea of leveldb's
// EnvWrapper). A decorator (timing, a demo's double sends, a test's counting) derives from it and
// overrides only what it changes, so closed() or a virtual added to Sink later reaches the
// wrapped sink instead of the base class's default (docs/architecture.md, "Decorators").
//
// deliver_bounded is forwarded too, so the wrapped sink keeps honouring the relay's
// DeliveryControl. A decorator that changes deliver and wants that change on the relay's path as
// well overrides deliver_bounded (the relay calls that one).
//
// Thread safety: as the wrapped sink's; the wrapper adds no state of its own.

#include <memory>
#include <utility>

#include "outpost/sink.h"

namespace outpost {

class SinkWrapper : public Sink {
 public:
  // `target` must outlive the wrapper.
  explicit SinkWrapper(Sink& target) : target_(&target) {}
  // The wrapper keeps `target` alive.
  explicit SinkWrapper(std::shared_ptr<Sink> target)
      : owned_(std::move(target)), target_(owned_.get()) {}

  Sink& target() const { return *target_; }

  std::string_view name() const override { return target_->name(); }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    return target_->deliver(events);
  }
  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl& control) override {
    return target_->deliver_bounded(events, control);
  }
  void close() override { target_->close(); }
  std::string closed() const override { return target_->closed(); }

 private:
  std::shared_ptr<Sink> owned_;  // empty when the caller owns the target
  Sink* target_;
};

}  // namespace outpost
