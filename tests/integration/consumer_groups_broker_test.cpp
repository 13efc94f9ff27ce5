// `outpost consumers seek|delete` on the broker sources, against real servers: Redis Streams
// (OUTPOST_TEST_REDIS_URL), Kafka (OUTPOST_TEST_KAFKA_BOOTSTRAP, librdkafka's mock cluster) and
// NATS JetStream (OUTPOST_TEST_NATS_URL) (docs/consumers.md, "Moving and deleting a group").
// Each log gets 3 events, then (after a time T) 3 more; a group consumes them all; then each
// TARGET is resolved by the CLI from the log and a consumer reads on from it: the beginning
// (everything read again, skipped as duplicates), T (the 3 after it, with --reprocess; not on
// Kafka's mock cluster, which cannot look up offsets by time), the
// position after the first message as the group recorded it, the end (nothing); a position the
// log does not take is exit 2; delete forgets the group. On Redis Streams the trimming registry
// (<stream>:checkpoints) follows a seek and loses the group's field on delete.

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <optional>
#include <thread>

#include "broker_consumers.h"
#include "cli_process.h"
#include "outpost/checkpoint_store.h"
#include "outpost/consumer.h"
#include "outpost/sinks/kafka.h"
#include "outpost/sinks/nats.h"
#include "outpost/sinks/redis_stream.h"
#include "store_cases.h"  // require_all_endpoints(), temp_dir()

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;
using brokers::env_text;

std::vector<StoredEvent> events(int n, int from) {
  std::vector<StoredEvent> out;
  for (int i = 0; i < n; ++i) {
    StoredEvent e;
    // One key: one Kafka partition, so the log's order is the order sent.
    static_cast<Event&>(e) = Event::make("t", "{\"n\":" + std::to_string(from + i) + "}", "k");
    out.push_back(e);
  }
  return out;
}

std::vector<std::string> ids_of(const std::vector<StoredEvent>& es, std::size_t from = 0) {
  std::vector<std::string> ids;
  for (std::size_t i = from; i < es.size(); ++i) ids.push_back(es[i].id.str());
  return ids;
}

class ConsumerGroupsBroker : public ::testing::Test {
 protected:
  // Sends A, waits past a time T, sends B; consumes the first message alone (its position is
  // `first_`), then the rest.
  void fill_and_consume(Sink& sink, const std::string& url) {
    url_ = url;
    cp_ = "sqlite:" + temp_dir() + "/" + brokers::unique_name("groups") + ".db";
    a_ = events(3, 0);
    b_ = events(3, 3);
    for (auto& r : sink.deliver(a_)) ASSERT_TRUE(r.ok()) << r.error;
    // The clock moves on past T before B is written (sleeping cannot make it move less).
    std::this_thread::sleep_for(20ms);
    t_ = format_rfc3339(outpost::now());
    std::this_thread::sleep_for(20ms);
    for (auto& r : sink.deliver(b_)) ASSERT_TRUE(r.ok()) << r.error;
    auto store = open_checkpoint_store(cp_);
    auto source = open_source(url_);
    ConsumerOptions o = options();
    o.batch_size = 1;
    Consumer one(*source, *store, o);
    std::size_t read = 0;
    for (int i = 0; i < 600 && read == 0; ++i) read = one.run_once([](ConsumerBatch&) {});
    ASSERT_EQ(read, 1u);
    first_ = store->group("g")->position;
    auto rest = consume();
    auto expect = ids_of(a_, 1), b = ids_of(b_);
    expect.insert(expect.end(), b.begin(), b.end());
    ASSERT_EQ(rest.handled, expect);
  }

  ConsumerOptions options() {
    ConsumerOptions o;
    o.group = "g";
    o.poll = 100ms;
    o.until_idle = 2000ms;
    return o;
  }

  struct Run {
    std::vector<std::string> handled;
    std::uint64_t read = 0, duplicates = 0;
  };
  // A consumer of the group until the log is idle: what it handled (ids, in order).
  Run consume() {
    auto store = open_checkpoint_store(cp_);
    auto source = open_source(url_);
    Run r;
    Consumer c(*source, *store, options());
    c.run([&](ConsumerBatch& b) {
      for (const auto& m : b.messages()) r.handled.push_back(m.event.id.str());
    });
    r.read = c.counters().read;
    r.duplicates = c.counters().duplicates;
    return r;
  }

  CliResult seek(const std::string& to, std::vector<std::string> more = {}) {
    std::vector<std::string> args{"consumers", "--checkpoint", cp_, "seek", "--group",
                                  "g",         "--to",         to};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(args);
  }

  // The whole sequence; `registered` reads the log's registration of the group (Redis).
  // `by_time` false: the log cannot look up times (librdkafka's mock cluster answers every
  // ListOffsets by timestamp with "none", as if no message were that late).
  void seek_to_each_target_then_delete(
      bool by_time, const std::function<std::optional<std::string>()>& registered = {}) {
    auto all = ids_of(a_);
    auto b = ids_of(b_);
    all.insert(all.end(), b.begin(), b.end());

    auto r = seek("beginning");
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_NE(r.out.find("moved group 'g' ("), std::string::npos) << r.out;
    const std::string beginning = r.out.substr(r.out.rfind(" to ") + 4);
    if (registered) {
      EXPECT_EQ(registered().value_or("none") + "\n", beginning) << "the registry follows";
    }
    auto run = consume();
    EXPECT_TRUE(run.handled.empty()) << "handled before: skipped";
    EXPECT_EQ(run.read, 6u);
    EXPECT_EQ(run.duplicates, 6u);

    if (by_time) {
      r = seek(t_, {"--reprocess"});
      ASSERT_EQ(r.code, 0) << r.all();
      EXPECT_EQ(consume().handled, b) << t_ << ": " << r.out;
    }

    r = seek(first_, {"--reprocess"});
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_NE(r.out.find(" to " + first_ + "\n"), std::string::npos) << r.out;
    EXPECT_EQ(consume().handled, std::vector<std::string>(all.begin() + 1, all.end()));

    r = seek("end", {"--reprocess"});
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_EQ(consume().read, 0u) << r.out;

    r = seek("not/a position");
    EXPECT_EQ(r.code, 2) << r.all();
    EXPECT_NE(r.err.find("'not/a position'"), std::string::npos) << r.err;

    r = run_cli({"consumers", "--checkpoint", cp_, "delete", "--group", "g"});
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_NE(r.out.find("deleted group 'g' ("), std::string::npos) << r.out;
    if (registered) {
      EXPECT_FALSE(registered()) << "the group's hold on trimming stays";
    }
    r = run_cli({"consumers", "--checkpoint", cp_, "seek", "--group", "g", "--to", "end"});
    EXPECT_EQ(r.code, 1) << r.all();
    EXPECT_NE(r.err.find("no consumer group 'g'"), std::string::npos) << r.err;
    EXPECT_EQ(consume().handled, all) << "a group deleted begins afresh";
  }

  // `outpost consume` of the group from `from` until the log is idle for `idle_ms`.
  CliResult consume_cli(const std::string& from, const std::string& idle_ms = "1500") {
    return run_cli({"consume", "--from", from, "--group", "g", "--checkpoint", cp_, "--sink",
                    "file:" + temp_dir() + "/" + brokers::unique_name("out") + ".jsonl",
                    "--until-idle", idle_ms});
  }

  std::string url_, cp_, t_, first_;
  std::vector<StoredEvent> a_, b_;
};

TEST_F(ConsumerGroupsBroker, RedisStreams) {
  const std::string redis = env_text("OUTPOST_TEST_REDIS_URL");
  if (redis.empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  auto ep = brokers::parse_redis_url(redis);
  const std::string stream = brokers::unique_name("groups");
  const std::string url =
      "redis-stream://" + ep.host + ":" + std::to_string(ep.port) + "/" + stream;
  auto sink = open_redis_stream_sink(url);
  fill_and_consume(*sink, url);
  if (HasFatalFailure()) return;
  auto c = brokers::redis_connect(ep);
  // Positions Redis does not take (a part of 2^64 or more) and positions past the stream's last
  // entry (the group would skip everything until then) are exit 2 naming them; neither the
  // checkpoint nor the trimming registry moves.
  const std::string at = open_checkpoint_store(cp_)->group("g")->position;
  auto registered = [&] {
    auto reg = brokers::redis_command(c.get(), {"HGET", stream + ":checkpoints", "g"});
    return reg->type == REDIS_REPLY_STRING ? std::string(reg->str, reg->len) : "none";
  };
  const std::string held = registered();
  for (const std::string to : {"18446744073709551616-0", "1-18446744073709551616",
                               "99999999999999-0", "18446744073709551615-18446744073709551615"}) {
    auto r = seek(to);
    EXPECT_EQ(r.code, 2) << to << ": " << r.all();
    EXPECT_NE(r.err.find("'" + to + "'"), std::string::npos) << r.err;
    EXPECT_EQ(open_checkpoint_store(cp_)->group("g")->position, at) << to;
    EXPECT_EQ(registered(), held) << to;
  }
  EXPECT_NE(seek("99999999999999-0").err.find("past the end of stream"), std::string::npos);
  seek_to_each_target_then_delete(true, [&]() -> std::optional<std::string> {
    auto r = brokers::redis_command(c.get(), {"HGET", stream + ":checkpoints", "g"});
    if (r->type != REDIS_REPLY_STRING) return std::nullopt;
    return std::string(r->str, r->len);
  });
  brokers::redis_command(c.get(), {"DEL", stream, stream + ":checkpoints"});
}

TEST_F(ConsumerGroupsBroker, Kafka) {
  const std::string bootstrap = env_text("OUTPOST_TEST_KAFKA_BOOTSTRAP");
  if (bootstrap.empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
    GTEST_SKIP() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
  }
  const std::string base = "kafka://" + bootstrap + "/" + brokers::unique_name("groups");
  auto sink = open_kafka_sink(base);
  fill_and_consume(*sink, base + "?group=" + brokers::unique_name("g") + "&assign=manual");
  if (HasFatalFailure()) return;
  // A time is not tested here: the mock cluster does not look up offsets by timestamp (a time
  // before every message resolves to the end, where a real broker gives the first offset).
  seek_to_each_target_then_delete(false);
}

TEST_F(ConsumerGroupsBroker, NatsJetStream) {
  const std::string nats = env_text("OUTPOST_TEST_NATS_URL");
  if (nats.empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_NATS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_NATS_URL not set";
  }
  const std::string stream = brokers::unique_name("GROUPS");
  const std::string url = nats + "/" + stream + ".events?stream=" + stream + "&create=1";
  auto sink = open_nats_sink(url);
  fill_and_consume(*sink, url);
  if (HasFatalFailure()) return;
  seek_to_each_target_then_delete(true);
  brokers::nats_delete_stream(nats, stream);
}

// Operator finding A3: the group follows its log, not the text of the URL it was first read
// with: tuning and the sink's parameters, `db=0` spelled out, `localhost` for 127.0.0.1 read on
// (exit 0, nothing read again); another stream is still refused (exit 2).
TEST_F(ConsumerGroupsBroker, RedisStreamsGroupFollowsItsLogUnderAnotherURL) {
  const std::string redis = env_text("OUTPOST_TEST_REDIS_URL");
  if (redis.empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  auto ep = brokers::parse_redis_url(redis);
  if (ep.db != 0) GTEST_SKIP() << "the URL spellings below are for db 0";
  const std::string stream = brokers::unique_name("follow");
  const std::string port = std::to_string(ep.port);
  const std::string url = "redis-stream://127.0.0.1:" + port + "/" + stream;
  auto sink = open_redis_stream_sink(url);
  fill_and_consume(*sink, url);
  if (HasFatalFailure()) return;
  for (const std::string& from : {url + "?timeout_ms=5000", url + "?maxlen=100", url + "?db=0",
                                  "redis-stream://localhost:" + port + "/" + stream}) {
    auto r = consume_cli(from);
    EXPECT_EQ(r.code, 0) << from << ": " << r.all();
    EXPECT_EQ(r.err.find("another log"), std::string::npos) << r.err;
  }
  auto r = consume_cli(url + "x");
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("consumer group 'g' reads"), std::string::npos) << r.err;
  r = run_cli({"consumers", "--checkpoint", cp_, "seek", "--group", "g", "--to", "end", "--from",
               "redis-stream://localhost:" + port + "/" + stream + "?timeout_ms=5000"});
  EXPECT_EQ(r.code, 0) << r.all();
  auto c = brokers::redis_connect(ep);
  brokers::redis_command(c.get(), {"DEL", stream, stream + ":checkpoints"});
}

// Operator finding A2 on Redis Streams: a stream deleted and re-created needs no error, because
// entry ids are the server clock's milliseconds: the new stream's entries come after the group's
// checkpoint and are all read (docs/consumers.md, "A log deleted and re-created").
TEST_F(ConsumerGroupsBroker, RedisStreamDeletedAndRecreatedIsReadWhole) {
  const std::string redis = env_text("OUTPOST_TEST_REDIS_URL");
  if (redis.empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  auto ep = brokers::parse_redis_url(redis);
  const std::string stream = brokers::unique_name("recreated");
  const std::string url = "redis-stream://" + ep.host + ":" + std::to_string(ep.port) + "/" +
                          stream + "?db=" + std::to_string(ep.db);
  auto sink = open_redis_stream_sink(url);
  fill_and_consume(*sink, url);
  if (HasFatalFailure()) return;
  auto c = brokers::redis_connect(ep);
  brokers::redis_command(c.get(), {"DEL", stream});
  auto fresh = events(2, 10);
  for (auto& r : open_redis_stream_sink(url)->deliver(fresh)) ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(consume().handled, ids_of(fresh));
  brokers::redis_command(c.get(), {"DEL", stream, stream + ":checkpoints"});
}

// Operator finding A2: a NATS stream deleted and re-created under a group restarts its sequences
// at 1; the group's checkpoint (6) is past the new stream's end. The consumer stops with an error
// naming the checkpoint, the end and `outpost consumers seek` (at its start, and while it reads),
// `consumers list` says the lag is unknown and why (not 0); after `seek --to beginning` the new
// stream is read. Before: the group skipped the new stream's messages up to sequence 6 in
// silence, lag 0.
TEST_F(ConsumerGroupsBroker, NatsStreamDeletedAndRecreatedIsAnErrorNotASilentSkip) {
  const std::string nats = env_text("OUTPOST_TEST_NATS_URL");
  if (nats.empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_NATS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_NATS_URL not set";
  }
  const std::string stream = brokers::unique_name("RECREATED");
  const std::string url = nats + "/" + stream + ".events?stream=" + stream + "&create=1";
  fill_and_consume(*open_nats_sink(url), url);
  if (HasFatalFailure()) return;
  auto recreate = [&](int n, int from) {
    brokers::nats_delete_stream(nats, stream);
    auto again = open_nats_sink(url);  // create=1: the stream anew, sequences from 1
    auto es = events(n, from);
    for (auto& r : again->deliver(es)) EXPECT_TRUE(r.ok()) << r.error;
    return es;
  };
  auto stopped_by_past_end = [&](const std::string& what) {
    EXPECT_NE(what.find("(sequence 6) is past the end of stream '" + stream + "'"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("outpost consumers seek --group"), std::string::npos) << what;
  };

  // A consumer of the group while the stream is re-created with `n` messages: the error that
  // ended its run (nothing handled).
  auto stopped_while_reading = [&](int n, int from) -> std::string {
    auto store = open_checkpoint_store(cp_);
    auto source = open_source(url_);
    ConsumerOptions o = options();
    o.until_idle = 120s;  // the error ends the run, not the idle time
    Consumer c(*source, *store, o);
    std::vector<std::string> handled;
    auto run = std::async(std::launch::async, [&] {
      c.run([&](ConsumerBatch& b) {
        for (const auto& m : b.messages()) handled.push_back(m.event.id.str());
      });
    });
    std::this_thread::sleep_for(500ms);  // reading (any time works: it is only a later start)
    recreate(n, from);
    if (run.wait_for(90s) != std::future_status::ready) {
      c.stop();
      run.wait();
      ADD_FAILURE() << "still reading in silence";
      return {};
    }
    EXPECT_TRUE(handled.empty());
    try {
      run.get();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "the run ended without an error";
    return {};
  };

  // While the group reads: the stream goes away under it and comes back with 2 messages.
  stopped_by_past_end(stopped_while_reading(2, 10));

  // At the start: the same, and exit 1 from `outpost consume`.
  auto fresh = recreate(2, 20);
  auto r = consume_cli(url_);
  EXPECT_EQ(r.code, 1) << r.all();
  stopped_by_past_end(r.err);
  EXPECT_EQ(open_checkpoint_store(cp_)->group("g")->position, "6");

  r = run_cli({"consumers", "--checkpoint", cp_, "list", "--json"});
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("\"lag\":-1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("lag unknown"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("past the end of stream"), std::string::npos) << r.err;

  r = seek("beginning");
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(consume().handled, ids_of(fresh));
  ASSERT_EQ(open_checkpoint_store(cp_)->group("g")->position, "2");

  // Re-created while the group reads and refilled past its checkpoint (2): the sequences cannot
  // tell, the stream's creation time does.
  auto what = stopped_while_reading(5, 30);
  EXPECT_NE(what.find("stream '" + stream + "'"), std::string::npos) << what;
  EXPECT_NE(what.find("was deleted and re-created while"), std::string::npos) << what;
  EXPECT_NE(what.find("outpost consumers seek --group"), std::string::npos) << what;
  brokers::nats_delete_stream(nats, stream);
}

// Operator finding A2 on Kafka: a topic deleted and re-created restarts its offsets at 0, so the
// group's checkpoint is past a partition's end (the mock cluster cannot delete a topic: the
// checkpoint is put there by hand, as a re-created topic leaves it). The consumer stops with an
// error naming the offset and the end; `consumers list` says the lag is unknown.
TEST_F(ConsumerGroupsBroker, KafkaCheckpointPastTheTopicsEndIsAnError) {
  const std::string bootstrap = env_text("OUTPOST_TEST_KAFKA_BOOTSTRAP");
  if (bootstrap.empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
    GTEST_SKIP() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
  }
  const std::string base = "kafka://" + bootstrap + "/" + brokers::unique_name("recreated");
  const std::string group = brokers::unique_name("g");
  fill_and_consume(*open_kafka_sink(base), base + "?group=" + group + "&assign=manual");
  if (HasFatalFailure()) return;
  const std::string at = open_checkpoint_store(cp_)->group("g")->position;  // "P:6"
  const std::string partition = at.substr(0, at.find(':'));
  // The store's own seek (the CLI refuses a position past the end: it checks the log).
  ASSERT_TRUE(open_checkpoint_store(cp_)->seek("g", partition + ":40"));
  // With assign=manual (all partitions at once) and as a member of the Kafka group (assigned
  // after the group's join: the error ends the run long before the idle time).
  for (const std::string& from : {url_, base + "?group=" + group}) {
    auto r = consume_cli(from, "30000");
    EXPECT_EQ(r.code, 1) << from << ": " << r.all();
    EXPECT_NE(r.err.find("(offset 40 of partition " + partition + ") is past the end of topic"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("ends at offset 6"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("`outpost consumers seek --group g --to "), std::string::npos) << r.err;
  }
  auto r = run_cli({"consumers", "--checkpoint", cp_, "list", "--json"});
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("\"lag\":-1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("past the end of topic"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace outpost::testing
