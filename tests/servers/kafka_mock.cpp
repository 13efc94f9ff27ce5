// outpost_kafka_mock: a 3-broker Kafka cluster from librdkafka's mock (rdkafka_mock.h) in a
// process of its own, so that our tests, the relay and kcat can all reach it on real
// 127.0.0.1 ports. The broker side is in memory.
//
//   outpost_kafka_mock [--brokers N]
//
// Prints "BOOTSTRAP=host:port,host:port,..." on stdout (flushed) once listening, then runs until
// SIGTERM/SIGINT or end of stdin. Commands, one per line on stdin (each answered "OK" or
// "ERR <why>" on stdout):
//   down <broker_id>            broker refuses connections and drops its existing ones
//   up <broker_id>              broker accepts connections again
//   rtt <broker_id> <ms>        adds round-trip latency to the broker
//   topic <name> <partitions>   creates a topic (replication factor = broker count) instead of
//                               relying on auto-creation
// Broker ids are 1..N.
//
// Accepted connections get TCP_NODELAY, as a real Kafka broker sets on its sockets
// (SocketServer: setTcpNoDelay(true)). librdkafka's mock leaves Nagle on: a response written
// while the previous one is unacknowledged then waits for the client's delayed ACK (~40 ms),
// which turned a 2 ms produce round trip into ~48 ms for a pipelining producer.

#include <dlfcn.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

// Interposes libc's accept() for the mock's listeners (librdkafka calls accept(), and a symbol
// of the executable takes precedence over libc's for the shared library too).
extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  using AcceptFn = int (*)(int, sockaddr*, socklen_t*);
  static const auto real = reinterpret_cast<AcceptFn>(dlsym(RTLD_NEXT, "accept"));
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  const int s = real(fd, addr, len);
  if (s >= 0) {
    const int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // best effort: Nagle otherwise
  }
  return s;
}

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

std::string run_command(rd_kafka_mock_cluster_t* cluster, const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  if (cmd == "down" || cmd == "up") {
    int id = 0;
    if (!(in >> id)) return "ERR usage: " + cmd + " <broker_id>";
    err = cmd == "down" ? rd_kafka_mock_broker_set_down(cluster, id)
                        : rd_kafka_mock_broker_set_up(cluster, id);
  } else if (cmd == "rtt") {
    int id = 0, ms = 0;
    if (!(in >> id >> ms)) return "ERR usage: rtt <broker_id> <ms>";
    err = rd_kafka_mock_broker_set_rtt(cluster, id, ms);
  } else if (cmd == "topic") {
    std::string name;
    int partitions = 0;
    if (!(in >> name >> partitions)) return "ERR usage: topic <name> <partitions>";
    err = rd_kafka_mock_topic_create(cluster, name.c_str(), partitions, 3);
  } else if (cmd.empty()) {
    return {};
  } else {
    return "ERR unknown command '" + cmd + "' (down, up, rtt, topic)";
  }
  if (err) return std::string("ERR ") + rd_kafka_err2str(err);
  return "OK";
}

}  // namespace

int main(int argc, char** argv) {
  int brokers = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--brokers") == 0 && i + 1 < argc) {
      brokers = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--brokers N]\n", argv[0]);
      return 2;
    }
  }
  if (brokers < 1) {
    std::fprintf(stderr, "--brokers must be >= 1\n");
    return 2;
  }

  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk) {
    std::fprintf(stderr, "rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(rk, brokers);
  if (!cluster) {
    std::fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return 1;
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::printf("BOOTSTRAP=%s\n", rd_kafka_mock_cluster_bootstraps(cluster));
  std::fflush(stdout);

  std::string pending;
  bool stdin_open = true;
  while (!g_stop) {
    if (!stdin_open) {
      pause();  // only a signal ends us now
      continue;
    }
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    int n = poll(&pfd, 1, 200);
    if (n <= 0) continue;
    char buf[4096];
    ssize_t got = read(STDIN_FILENO, buf, sizeof buf);
    if (got <= 0) {
      // End of stdin: keep serving until a signal (the usual way to stop us).
      stdin_open = false;
      continue;
    }
    pending.append(buf, static_cast<std::size_t>(got));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string reply = run_command(cluster, pending.substr(0, nl));
      pending.erase(0, nl + 1);
      if (!reply.empty()) {
        std::printf("%s\n", reply.c_str());
        std::fflush(stdout);
      }
    }
  }
  rd_kafka_mock_cluster_destroy(cluster);
  rd_kafka_destroy(rk);
  return 0;
}
