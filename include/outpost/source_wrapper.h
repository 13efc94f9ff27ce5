#pragma once
// SourceWrapper: a Source that forwards every call to another Source (the idea of leveldb's
// EnvWrapper). A decorator (the daemon's liveness touch, a test's checks) derives from it and
// overrides only what it changes, so same_log(), set_notice() or a virtual added to Source later
// reaches the wrapped source instead of the base class's default (docs/architecture.md,
// "Decorators").
//
// Thread safety: as the wrapped source's; the wrapper adds no state of its own.

#include <memory>
#include <utility>

#include "outpost/source.h"

namespace outpost {

class SourceWrapper : public Source {
 public:
  // `target` must outlive the wrapper.
  explicit SourceWrapper(Source& target) : target_(&target) {}
  // The wrapper keeps `target` alive.
  explicit SourceWrapper(std::shared_ptr<Source> target)
      : owned_(std::move(target)), target_(owned_.get()) {}

  Source& target() const { return *target_; }

  std::string_view name() const override { return target_->name(); }
  std::string url() const override { return target_->url(); }
  bool same_log(const std::string& stored_url) const override {
    return target_->same_log(stored_url);
  }
  void set_group(const std::string& group) override { target_->set_group(group); }
  void seek(const std::string& position) override { target_->seek(position); }
  std::vector<Message> read(std::size_t max, Duration wait) override {
    return target_->read(max, wait);
  }
  std::optional<std::int64_t> lag(const std::string& position) override {
    return target_->lag(position);
  }
  void committed(const std::string& group, const std::string& position) override {
    target_->committed(group, position);
  }
  void retire(const std::string& group) override { target_->retire(group); }
  std::string position_for(const SeekTarget& target) override {
    return target_->position_for(target);
  }
  void set_registration(const std::string& group,
                        const std::optional<std::string>& position) override {
    target_->set_registration(group, position);
  }
  bool partitioned() const override { return target_->partitioned(); }
  std::string merge(const std::string& stored, const std::string& mine) const override {
    return target_->merge(stored, mine);
  }
  bool can_read_ahead() const override { return target_->can_read_ahead(); }
  void set_checkpoint_reader(std::function<std::string()> reader) override {
    target_->set_checkpoint_reader(std::move(reader));
  }
  void set_notice(std::function<void(const std::string&, bool warning)> notice) override {
    target_->set_notice(std::move(notice));
  }

 private:
  std::shared_ptr<Source> owned_;  // empty when the caller owns the target
  Source* target_;
};

}  // namespace outpost
