// Not a test: consumer throughput for docs/benchmarks.md (issue 12). For each log it appends
// N events (200-byte payloads, 1,000 keys) and then measures, in the same run:
//   consumer:  a Consumer with a no-op handler at batch B: inbox rows + checkpoint committed in
//              SQLite per batch (the figure), with VmRSS after a tenth of the log and at the end
//              (flat = memory does not grow with the log);
//   source:    the outpost Source::read loop alone (decoding, no store);
//   baseline:  the same client's plain read loop over the same messages, B at a time, no
//              decoding: getline on the file, XREAD COUNT B on Redis, rd_kafka_consumer_poll on
//              every partition, a pull consumer's Fetch(B) on JetStream;
//   parse baseline (file only): getline plus nlohmann::json::parse of each line, the least any
//              reader of a JSON-lines log does (the plain getline parses nothing);
// and prints one JSON object per log (docs/benchmarks.md names where they apply; there is no
// latency phase):
//   {"log":"file","events":N,"batch":B,"events_per_s":X,"baseline_events_per_s":X,"ratio":X,
//    "source_events_per_s":X,"peak_rss_mb":X,"rss_tenth_mb":X,"rss_end_mb":X,
//    "cpu_us_per_event":X,"source_cpu_us_per_event":X[,"parse_baseline_events_per_s":X,
//    "parse_ratio":X]}
// (CPU: this process, all threads, per message, while the consumer / the source loop ran: a
// figure a busy machine disturbs less than messages/s.)
//
// usage: outpost_consume_bench N BATCH LOG...
//   LOG: file (a new temp file), redis-stream://host:port/STREAM, kafka://host:port,.../TOPIC,
//        nats://host:port/SUBJECT?stream=NAME (created). Use a new stream/topic name each run.
//   The Kafka mock cluster keeps only the newest ~5 MB per partition (~10,000 of these messages,
//   4 partitions for an auto-created topic): give it at most 30,000.

#include <hiredis/hiredis.h>
#include <librdkafka/rdkafka.h>
#include <nats/nats.h>
#include <sys/resource.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "outpost/consumer.h"
#include "outpost/json.h"
#include "outpost/sinks/kafka.h"
#include "outpost/sinks/nats.h"
#include "outpost/sinks/redis_stream.h"

using namespace outpost;
using Steady = std::chrono::steady_clock;

namespace {

double seconds_since(Steady::time_point t) {
  return std::chrono::duration<double>(Steady::now() - t).count();
}

double vm_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

// CPU seconds this process used so far (all threads: the client libraries' too).
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

double vm_hwm_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

std::vector<StoredEvent> make_events(std::size_t from, std::size_t n) {
  std::vector<StoredEvent> out;
  out.reserve(n);
  for (std::size_t i = from; i < from + n; ++i) {
    std::string payload = "{\"ride\":" + std::to_string(i) + ",\"distance\":12.5,\"pad\":\"";
    payload.append(200 - 2 - payload.size(), 'x');
    payload += "\"}";
    StoredEvent e;
    static_cast<Event&>(e) = Event::make("ride.created", payload, "k" + std::to_string(i % 1000));
    out.push_back(std::move(e));
  }
  return out;
}

// Appends n events to the log, 1,000 at a time (one sink call each), never all in memory.
void populate(const std::string& log_url, const std::string& file_path, std::size_t n) {
  std::unique_ptr<Sink> sink;
  std::ofstream file;
  if (!file_path.empty())
    file.open(file_path, std::ios::app);
  else if (log_url.rfind("redis-stream:", 0) == 0)
    sink = open_redis_stream_sink(log_url);
  else if (log_url.rfind("kafka:", 0) == 0)
    sink = open_kafka_sink(log_url);
  else
    sink = open_nats_sink(log_url);
  for (std::size_t at = 0; at < n; at += 1000) {
    auto batch = make_events(at, std::min<std::size_t>(1000, n - at));
    if (file.is_open()) {
      for (const auto& e : batch) file << to_json(e) << '\n';
      continue;
    }
    for (const auto& r : sink->deliver(batch))
      if (!r.ok()) throw std::runtime_error("populating " + log_url + ": " + r.error);
  }
  if (sink) sink->close();
}

// Throws when `got` has not grown for 30 s: the log holds fewer messages than asked for (the
// Kafka mock cluster keeps only the newest ~5 MB per partition, for instance).
class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)) {}
  void check(std::size_t got, std::size_t n) {
    if (got != last_) {
      last_ = got;
      since_ = Steady::now();
    } else if (seconds_since(since_) > 30) {
      throw std::runtime_error(what_ + ": stuck at " + std::to_string(got) + " of " +
                               std::to_string(n) +
                               " messages for 30 s (retention trimmed the log?)");
    }
  }

 private:
  std::string what_;
  std::size_t last_ = static_cast<std::size_t>(-1);
  Steady::time_point since_ = Steady::now();
};

// ---- plain client read loops (the baselines) ---------------------------------------------------

std::size_t baseline_file(const std::string& path, std::size_t n, std::size_t) {
  std::ifstream in(path);
  std::string line;
  std::size_t got = 0;
  while (got < n && std::getline(in, line)) ++got;
  return got;
}

std::size_t parse_baseline_file(const std::string& path, std::size_t n) {
  std::ifstream in(path);
  std::string line;
  std::size_t got = 0;
  while (got < n && std::getline(in, line))
    got += !nlohmann::json::parse(line, nullptr, false).is_discarded();
  return got;
}

std::size_t baseline_redis(const std::string& host, int port, const std::string& stream,
                           std::size_t n, std::size_t batch) {
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(redisConnect(host.c_str(), port),
                                                           redisFree);
  if (!c || c->err) throw std::runtime_error("redis connect");
  std::string last = "0-0", count = std::to_string(batch);
  std::size_t got = 0;
  while (got < n) {
    const char* argv[] = {"XREAD", "COUNT", count.c_str(), "STREAMS", stream.c_str(), last.c_str()};
    auto* r = static_cast<redisReply*>(redisCommandArgv(c.get(), 6, argv, nullptr));
    if (!r) throw std::runtime_error("redis XREAD");
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
      const redisReply* entries = r->element[0]->element[1];
      got += entries->elements;
      const redisReply* id = entries->element[entries->elements - 1]->element[0];
      last.assign(id->str, id->len);
    }
    freeReplyObject(r);
  }
  return got;
}

std::size_t baseline_kafka(const std::string& brokers, const std::string& topic, std::size_t n,
                           std::size_t) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", ("baseline-" + std::to_string(::getpid())).c_str(), err,
                    sizeof err);
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
  rd_kafka_conf_set(conf, "enable.partition.eof", "false", err, sizeof err);
  rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
  std::unique_ptr<rd_kafka_t, void (*)(rd_kafka_t*)> rk(
      rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err), [](rd_kafka_t* k) {
        rd_kafka_consumer_close(k);
        rd_kafka_destroy(k);
      });
  rd_kafka_topic_t* t = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk.get(), 0, t, &md, 10'000)) throw std::runtime_error("kafka metadata");
  rd_kafka_topic_destroy(t);
  auto* parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
  for (int i = 0; i < md->topics[0].partition_cnt; ++i)
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), md->topics[0].partitions[i].id)
        ->offset = RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_metadata_destroy(md);
  rd_kafka_assign(rk.get(), parts);
  rd_kafka_topic_partition_list_destroy(parts);
  std::size_t got = 0;
  Progress progress("kafka baseline");
  while (got < n) {
    progress.check(got, n);
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 1000);
    if (!m) continue;
    if (!m->err) ++got;
    rd_kafka_message_destroy(m);
  }
  return got;
}

std::size_t baseline_nats(const std::string& server, const std::string& subject,
                          const std::string& stream, std::size_t n, std::size_t batch) {
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, server.c_str()) != NATS_OK)
    throw std::runtime_error("nats connect");
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, nullptr);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Config.AckPolicy = js_AckNone;
  so.Config.DeliverPolicy = js_DeliverAll;
  natsSubscription* sub = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  if (js_PullSubscribe(&sub, js, subject.c_str(), nullptr, nullptr, &so, &jerr) != NATS_OK)
    throw std::runtime_error("nats pull subscribe");
  std::size_t got = 0;
  Progress progress("nats baseline");
  while (got < n) {
    progress.check(got, n);
    natsMsgList list{};
    natsSubscription_Fetch(&list, sub, static_cast<int>(batch), 1000, &jerr);
    got += static_cast<std::size_t>(list.Count);
    natsMsgList_Destroy(&list);
  }
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return got;
}

// "scheme://[user@]host:port,.../path?query" -> its pieces (the bench's own URLs).
struct Parts {
  std::string hostports, path, query;
};
Parts split(const std::string& url) {
  Parts p;
  auto rest = url.substr(url.find("://") + 3);
  auto q = rest.find('?');
  if (q != std::string::npos) p.query = rest.substr(q + 1), rest = rest.substr(0, q);
  auto slash = rest.find('/');
  p.hostports = rest.substr(0, slash);
  p.path = slash == std::string::npos ? "" : rest.substr(slash + 1);
  return p;
}

std::string param(const std::string& query, const std::string& name) {
  auto at = ("&" + query).find("&" + name + "=");
  if (at == std::string::npos) return "";
  auto v = query.substr(at + name.size() + 1);
  return v.substr(0, v.find('&'));
}

// ---- one log ------------------------------------------------------------------------------------

void measure(const std::string& given, std::size_t n, std::size_t batch, const std::string& dir) {
  static int counter = 0;
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(counter++);
  std::string log_url = given, file_path, name, source_url;
  if (given == "file") {
    file_path = dir + "/log-" + tag + ".jsonl";
    log_url = "file:" + file_path;
  }
  name = log_url.substr(0, log_url.find(':'));
  source_url = log_url;
  if (name == "kafka")
    source_url += (source_url.find('?') == std::string::npos ? "?" : "&") +
                  std::string("group=bench_") + tag + "&assign=manual";
  populate(log_url, file_path, n);

  // The outpost source alone (also warms the page cache and the broker).
  double source_rate = 0, source_cpu = 0;
  {
    auto src = open_source(source_url);
    src->seek("");
    std::size_t got = 0;
    Progress progress(name + " source read");
    auto t = Steady::now();
    double c0 = cpu_seconds();
    while (got < n) {
      progress.check(got, n);
      got += src->read(batch, std::chrono::milliseconds(1000)).size();
    }
    source_rate = static_cast<double>(got) / seconds_since(t);
    source_cpu = (cpu_seconds() - c0) * 1e6 / static_cast<double>(got);
  }

  // The consumer: inbox + checkpoint committed in SQLite per batch, no-op handler.
  double rate = 0, rss_tenth = 0, rss_end = 0, cpu = 0;
  {
    auto store = open_checkpoint_store("sqlite:" + dir + "/cp-" + tag + ".db");
    auto src = open_source(source_url);
    ConsumerOptions o;
    o.group = "bench";
    o.batch_size = batch;
    o.poll = std::chrono::milliseconds(1000);
    // Stuck for 30 s (retention trimmed the log?): run() returns, and the count says so.
    o.until_idle = std::chrono::seconds(30);
    Consumer c(*src, *store, o);
    std::size_t handled = 0;
    auto t = Steady::now();
    double c0 = cpu_seconds(), seconds = 0, cpu_end = 0;
    // run(), as `outpost consume` does (it reads the next batch ahead where the source can).
    // The clock stops in the last batch's handler (all but that batch's commit, 1/200 of the
    // run at 200,000 / 1,000): after stop() run() still waits for the read ahead, up to `poll`
    // on a log that has nothing more.
    c.run([&](ConsumerBatch& b) {
      handled += b.size() + b.duplicates();
      if (rss_tenth == 0 && handled >= n / 10) rss_tenth = vm_rss_mb();
      if (handled >= n) {
        seconds = seconds_since(t);
        cpu_end = cpu_seconds();
        c.stop();
      }
    });
    if (handled < n)
      throw std::runtime_error(name + " consumer: stuck at " + std::to_string(handled) + " of " +
                               std::to_string(n) +
                               " messages for 30 s (retention trimmed the log?)");
    rate = static_cast<double>(handled) / seconds;
    cpu = (cpu_end - c0) * 1e6 / static_cast<double>(handled);
    rss_end = vm_rss_mb();
  }

  // The same client's plain read loop.
  double base_rate = 0;
  {
    auto t = Steady::now();
    std::size_t got = 0;
    Parts p = split(log_url);
    if (name == "file") {
      got = baseline_file(file_path, n, batch);
    } else if (name == "redis-stream") {
      auto colon = p.hostports.rfind(':');
      got = baseline_redis(p.hostports.substr(0, colon), std::stoi(p.hostports.substr(colon + 1)),
                           p.path, n, batch);
    } else if (name == "kafka") {
      got = baseline_kafka(p.hostports, p.path, n, batch);
    } else {
      got = baseline_nats("nats://" + p.hostports, p.path, param(p.query, "stream"), n, batch);
    }
    base_rate = static_cast<double>(got) / seconds_since(t);
  }
  std::string parse_fields;
  if (name == "file") {
    auto t = Steady::now();
    double parse_rate = static_cast<double>(parse_baseline_file(file_path, n)) / seconds_since(t);
    char buf[128];
    std::snprintf(buf, sizeof buf, ",\"parse_baseline_events_per_s\":%.0f,\"parse_ratio\":%.2f",
                  parse_rate, rate / parse_rate);
    parse_fields = buf;
  }
  std::printf(
      "{\"log\":\"%s\",\"events\":%zu,\"batch\":%zu,\"events_per_s\":%.0f,"
      "\"baseline_events_per_s\":%.0f,\"ratio\":%.2f,\"source_events_per_s\":%.0f,"
      "\"peak_rss_mb\":%.1f,\"rss_tenth_mb\":%.1f,\"rss_end_mb\":%.1f,"
      "\"cpu_us_per_event\":%.2f,\"source_cpu_us_per_event\":%.2f%s}\n",
      name.c_str(), n, batch, rate, base_rate, rate / base_rate, source_rate, vm_hwm_mb(),
      rss_tenth, rss_end, cpu, source_cpu, parse_fields.c_str());
  std::fflush(stdout);
  if (!file_path.empty()) std::filesystem::remove(file_path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s N BATCH LOG...\n  LOG: file | redis-stream://host:port/STREAM | "
                 "kafka://host:port/TOPIC | nats://host:port/SUBJECT?stream=NAME\n",
                 argv[0]);
    return 2;
  }
  std::size_t n = std::stoul(argv[1]);
  std::size_t batch = std::stoul(argv[2]);
  std::string dir = std::filesystem::temp_directory_path() /
                    ("outpost-consume-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  int rc = 0;
  for (int i = 3; i < argc; ++i) {
    try {
      measure(argv[i], n, batch, dir);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", argv[i], e.what());
      rc = 1;
    }
  }
  std::filesystem::remove_all(dir);
  return rc;
}
