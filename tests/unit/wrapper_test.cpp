// The forwarding bases (include/outpost/{store,sink,source}_wrapper.h) and the daemon's measuring
// decorators built on them (apps/outpost/instrument.h): a decorator reaches the wrapped object
// for every call it does not change. Before the bases, the measuring Store decorator answered
// archived() with Store's default ("keeps no archive") and the Sink one once dropped closed().

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "instrument.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/sink_wrapper.h"
#include "outpost/source_wrapper.h"
#include "outpost/store_wrapper.h"

namespace outpost::unit {
namespace {

using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("outpost-wrapper-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A sink gone for good, as the file sink is once its pipe's reader went away.
class GoneSink final : public Sink {
 public:
  std::string_view name() const override { return "gone"; }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    return std::vector<DeliveryResult>(events.size(), DeliveryResult::failed("gone"));
  }
  void close() override { ++closes; }
  std::string closed() const override { return "the reader went away"; }
  int closes = 0;
};

// A source whose non-pure virtuals all answer something other than Source's defaults.
class ChattySource final : public Source {
 public:
  std::string_view name() const override { return "chatty"; }
  std::string url() const override { return "chatty:log"; }
  bool same_log(const std::string& stored_url) const override { return stored_url == "alias"; }
  void seek(const std::string&) override {}
  std::vector<Message> read(std::size_t, Duration) override { return {}; }
  std::optional<std::int64_t> lag(const std::string&) override { return 7; }
  void committed(const std::string& group, const std::string&) override { last_group = group; }
  void retire(const std::string& group) override { retired = group; }
  std::string position_for(const SeekTarget& t) override { return "at:" + t.position; }
  void set_registration(const std::string& group,
                        const std::optional<std::string>& position) override {
    registered = group + "=" + position.value_or("none");
  }
  bool partitioned() const override { return true; }
  std::string merge(const std::string& stored, const std::string& mine) const override {
    return stored + "+" + mine;
  }
  bool can_read_ahead() const override { return true; }
  void set_checkpoint_reader(std::function<std::string()> reader) override {
    checkpoint_reader = std::move(reader);
  }
  void set_notice(std::function<void(const std::string&, bool)> n) override {
    notice = std::move(n);
  }
  std::string last_group, retired, registered;
  std::function<std::string()> checkpoint_reader;
  std::function<void(const std::string&, bool)> notice;
};

// Delivers one event through `store` (claim + ack) and reads the archive through it.
std::vector<ArchivedEvent> deliver_one_and_read_archive(Store& store) {
  store.append(std::vector<Event>{Event::make("a", R"({"n":1})", "k")});
  auto batch = store.claim(10, 30000ms);
  EXPECT_EQ(batch.events.size(), 1u);
  std::vector<EventId> ids;
  for (const auto& e : batch.events) ids.push_back(e.id);
  EXPECT_EQ(store.ack(batch, ids), 1u);
  return store.archived(10);
}

TEST(MeasuringDecorators, TheStoreOneReadsTheWrappedStoresArchive) {
  TempDir dir;
  auto inner = open_store("sqlite:" + dir.file("a.db") + "?archive=true");
  cli::PipelineMetrics metrics;
  auto timed = cli::instrument_store(*inner, metrics);
  auto got = deliver_one_and_read_archive(*timed);  // threw "keeps no archive" before
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, "a");
  EXPECT_EQ(metrics.claim_seconds.snapshot().count, 1u);
}

TEST(MeasuringDecorators, TheSinkOneSaysTheWrappedSinkIsGoneAndClosesIt) {
  GoneSink inner;
  cli::PipelineMetrics metrics;
  auto timed = cli::instrument_sink(inner, metrics);
  EXPECT_EQ(timed->name(), "gone");
  EXPECT_EQ(timed->closed(), "the reader went away");
  timed->close();
  EXPECT_EQ(inner.closes, 1);
}

// Issue 18 defect 8: the time in the outbox (emit to ack), per acked event, on both of the
// relay's settle paths; a nacked event is not counted.
TEST(MeasuringDecorators, TheTimeInTheOutboxIsObservedPerAckedEvent) {
  auto inner = open_store("memory:");
  cli::PipelineMetrics metrics;
  auto timed = cli::instrument_store(*inner, metrics);
  auto aged = [](const char* type, std::chrono::seconds age) {
    auto e = Event::make(type, "{}", type);
    e.occurred_at = now() - age;
    return e;
  };
  timed->append(std::vector<Event>{aged("a", 5s), aged("b", 7s)});
  auto batch = timed->claim(10, 30000ms);
  ASSERT_EQ(batch.events.size(), 2u);
  // Acked in the reverse of batch order: each is found all the same.
  std::vector<EventId> ids{batch.events[1].id, batch.events[0].id};
  ASSERT_EQ(timed->ack(batch, ids), 2u);
  auto h = metrics.outbox_seconds.snapshot();
  EXPECT_EQ(h.count, 2u);
  EXPECT_GE(h.sum, 12.0);
  EXPECT_LT(h.sum, 12.0 + 600);  // generous: a slow machine, never a wrong event
  EXPECT_EQ(h.cumulative[std::size_t(std::find(h.bounds.begin(), h.bounds.end(), 2.5) -
                                     h.bounds.begin())],
            0u)
      << "none under 2.5 s";

  timed->append(std::vector<Event>{aged("c", 30s), aged("d", 1s)});
  auto next = timed->claim(10, 30000ms);
  ASSERT_EQ(next.events.size(), 2u);
  std::vector<EventId> acks{next.events[0].id};
  std::vector<Nack> nacks{{next.events[1].id, "refused", std::nullopt}};
  SettleCounts counts;
  timed->settle_and_claim(next, Settlement{acks, nacks, {}}, counts, 10, 30000ms);
  EXPECT_EQ(counts.acked, 1u);
  h = metrics.outbox_seconds.snapshot();
  EXPECT_EQ(h.count, 3u) << "the nacked event is not counted";
  EXPECT_GE(h.sum, 42.0);
}

TEST(ForwardingBases, AStoreWrapperThatChangesNothingIsTheWrappedStore) {
  TempDir dir;
  auto inner = std::shared_ptr<Store>(open_store("sqlite:" + dir.file("b.db") + "?archive=true"));
  StoreWrapper wrapper(inner);
  EXPECT_EQ(wrapper.backend(), "sqlite");
  EXPECT_EQ(deliver_one_and_read_archive(wrapper).size(), 1u);
  wrapper.append(std::vector<Event>{Event::make("b", R"({"n":2})", "k2")});
  EXPECT_EQ(wrapper.stats().pending, 1);
  EXPECT_EQ(wrapper.list(10).size(), 1u);
  auto batch = wrapper.claim(10, 30000ms);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_TRUE(wrapper.renew(batch, 30000ms));
  EXPECT_EQ(wrapper.leased(10).size(), 1u);
  std::vector<Nack> nacks{{batch.events[0].id, "refused", std::nullopt}};
  EXPECT_EQ(wrapper.nack(batch, nacks), 1u);
  EXPECT_EQ(wrapper.dead(10).size(), 1u);
  EXPECT_EQ(wrapper.retry_all(), 1u);
  SettleCounts counts;
  auto next = wrapper.settle_and_claim(ClaimedBatch{}, Settlement{}, counts, 10, 30000ms);
  ASSERT_EQ(next.events.size(), 1u);
  std::vector<EventId> ids{next.events[0].id};
  EXPECT_EQ(wrapper.release(next, ids), 1u);
  EXPECT_EQ(&wrapper.target(), inner.get());
}

// Store by audience (store.h): the relay's half and the operators' half of one wrapper reach the
// same wrapped store, and one backend() answers both.
TEST(ForwardingBases, BothHalvesOfAStoreWrapperReachTheWrappedStore) {
  auto inner = std::shared_ptr<Store>(open_store("memory:"));
  StoreWrapper wrapper(inner);
  OutboxStore& relay_half = wrapper;
  OutboxAdmin& admin_half = wrapper;
  EXPECT_EQ(relay_half.backend(), "memory");
  EXPECT_EQ(admin_half.backend(), "memory");
  relay_half.append(std::vector<Event>{Event::make("h", R"({"n":3})", "k3")});
  EXPECT_EQ(admin_half.stats().pending, 1);
  EXPECT_EQ(inner->stats().pending, 1);
  auto batch = relay_half.claim(10, 30000ms);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(admin_half.leased(10).size(), 1u);
  EXPECT_TRUE(admin_half.archived(10).empty()) << "memory without archive=1 keeps none";
}

TEST(ForwardingBases, ASinkWrapperThatChangesNothingIsTheWrappedSink) {
  GoneSink inner;
  SinkWrapper wrapper(inner);
  EXPECT_EQ(wrapper.name(), "gone");
  EXPECT_EQ(wrapper.closed(), "the reader went away");
  std::vector<StoredEvent> events(2);
  DeliveryControl control;
  auto results = wrapper.deliver_bounded(events, control);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].error, "gone");
  wrapper.close();
  EXPECT_EQ(inner.closes, 1);
}

TEST(ForwardingBases, ASourceWrapperThatChangesNothingIsTheWrappedSource) {
  ChattySource inner;
  SourceWrapper wrapper(inner);
  EXPECT_EQ(wrapper.name(), "chatty");
  EXPECT_EQ(wrapper.url(), "chatty:log");
  EXPECT_TRUE(wrapper.same_log("alias"));
  EXPECT_EQ(wrapper.lag(""), 7);
  EXPECT_TRUE(wrapper.partitioned());
  EXPECT_TRUE(wrapper.can_read_ahead());
  EXPECT_EQ(wrapper.merge("a", "b"), "a+b");
  wrapper.committed("g", "1");
  EXPECT_EQ(inner.last_group, "g");
  wrapper.retire("g2");
  EXPECT_EQ(inner.retired, "g2");
  EXPECT_EQ(wrapper.position_for({SeekTarget::Kind::position, "5", {}}), "at:5");
  wrapper.set_registration("g3", std::nullopt);
  EXPECT_EQ(inner.registered, "g3=none");
  wrapper.set_checkpoint_reader([] { return std::string("cp"); });
  ASSERT_TRUE(inner.checkpoint_reader);
  EXPECT_EQ(inner.checkpoint_reader(), "cp");
  wrapper.set_notice([](const std::string&, bool) {});
  EXPECT_TRUE(inner.notice);
}

}  // namespace
}  // namespace outpost::unit
