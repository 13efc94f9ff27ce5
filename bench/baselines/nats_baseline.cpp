// The raw JetStream baseline for `outpost bench --sink nats://...`: the same number of messages
// (payload_bytes each, a unique Nats-Msg-Id each and the same CloudEvents headers as the sink
// sends: ce-specversion, ce-id, ce-type, ce-source, ce-time, ce-partitionkey with keys round robin
// over 1000; they cost nats-server ~25% more CPU per message) published by a plain cnats
// js_PublishMsgAsync loop with 4096 pending acks, then js_PublishAsyncComplete. No outpost code
// runs here. Subject: the sink URL's subject with `{type}` -> "baseline"; the stream named in
// the URL must capture it (it does for `events.{type}` created with create=1).

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "baseline.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::bench {

BaselineResult nats_baseline(const BaselineRequest& request) {
  const auto url = core::Url::parse(request.url);
  std::string subject = url.path();
  if (auto pos = subject.find("{type}"); pos != std::string::npos)
    subject.replace(pos, 6, "baseline");
  const auto& hp = url.hosts().at(0);
  const std::string server = "nats://" + hp.host + ":" + std::to_string(hp.port ? hp.port : 4222);

  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, server.c_str()) != NATS_OK)
    throw ConnectionError("nats", "nats baseline: cannot connect to " + server);
  std::unique_ptr<natsConnection, void (*)(natsConnection*)> conn(nc, natsConnection_Destroy);
  static std::atomic<std::size_t> acked;
  acked = 0;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.MaxPending = 4096;
  jo.PublishAsync.AckHandler = [](jsCtx*, natsMsg* m, jsPubAck* pa, jsPubAckErr*, void*) {
    if (pa) acked.fetch_add(1, std::memory_order_relaxed);
    natsMsg_Destroy(m);
  };
  jsCtx* js = nullptr;
  if (natsConnection_JetStream(&js, nc, &jo) != NATS_OK)
    throw ConnectionError("nats", "nats baseline: no JetStream context");
  std::unique_ptr<jsCtx, void (*)(jsCtx*)> ctx(js, jsCtx_Destroy);

  const std::string payload(request.payload_bytes, 'x');
  const std::string occurred = "2026-11-22T00:00:00.000000Z";
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("key-" + std::to_string(i));
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < request.events; ++i) {
    natsMsg* msg = nullptr;
    natsMsg_Create(&msg, subject.c_str(), nullptr, payload.data(),
                   static_cast<int>(payload.size()));
    const std::string id = EventId::generate().str();
    natsMsgHeader_Set(msg, "ce-specversion", "1.0");
    natsMsgHeader_Set(msg, "ce-id", id.c_str());
    natsMsgHeader_Set(msg, "ce-type", "baseline");
    natsMsgHeader_Set(msg, "ce-source", "outpost");
    natsMsgHeader_Set(msg, "ce-time", occurred.c_str());
    natsMsgHeader_Set(msg, "ce-partitionkey", keys[i % keys.size()].c_str());
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = id.c_str();
    js_PublishMsgAsync(js, &msg, &po);
    natsMsg_Destroy(msg);  // no-op when cnats took it
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 60'000;
  js_PublishAsyncComplete(js, &po);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BaselineResult r;
  r.events_per_s = seconds > 0 ? acked.load() / seconds : 0;
  r.what =
      "cnats js_PublishMsgAsync loop with Nats-Msg-Id and the CloudEvents headers, 4096 pending "
      "acks, subject " +
      subject;
  return r;
}

}  // namespace outpost::bench
