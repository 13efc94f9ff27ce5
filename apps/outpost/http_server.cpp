#include "http_server.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "error_log.h"
#include "http_connections.h"
#include "listen_address.h"
#include "log.h"
#include "outpost/error.h"

namespace outpost::cli {
namespace {

// The server's budget (docs/operations.md, "HTTP endpoints"): requests are small (a mutation's
// body is a pipeline name and a list of ids or a filter), and probes and scrapes must answer
// while clients are slow or hostile. A connection waits without a thread until its request's
// head has arrived, and holds one of its 32 threads only while that request is served
// (http_connections.h); head and body must arrive within request_deadline (10 s), each read of the
// body waits at most read_timeout for the next bytes. Connections over the caps are closed at
// once (a file descriptor each; a peer's cap leaves room for the others').
constexpr std::size_t kMaxBody = 1 << 20;  // 1 MiB
constexpr ConnectionServer::Limits kLimits{
    .threads = 32,
    .max_connections = 512,
    .max_per_peer = 128,
    .request_deadline = std::chrono::seconds(10),
    .read_timeout = std::chrono::seconds(3),
    .write_timeout = std::chrono::seconds(3),
    .keep_alive = std::chrono::seconds(2),
    .keep_alive_requests = 100,
};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "name" of "name:port", "[v6]:port", "name" or "[v6]", lowercased, brackets removed.
std::string host_name(const std::string& host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return close == std::string::npos ? std::string() : lowercase(host.substr(1, close - 1));
  }
  auto colon = host.find(':');
  if (colon != std::string::npos && host.find(':', colon + 1) != std::string::npos)
    return lowercase(host);  // a bare IPv6 address (listen hosts are written so)
  return lowercase(host.substr(0, colon));
}

bool is_ip_literal(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool is_loopback(const std::string& name) {
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return name == "::1" || name == "localhost";
}

// Refusals are logged, thinned out as delivery errors are (error_log.h): an attacker's flood
// must not flood the log.
void log_refusal(const std::string& what) {
  static std::atomic<std::uint64_t> refusals{0};
  auto n = refusals.fetch_add(1) + 1;
  if (error_is_printed(n)) log(what + errors_so_far(n), "", spdlog::level::warn);
}

}  // namespace

bool host_allowed(const std::string& host_header, const std::string& listen_host,
                  const std::vector<std::string>& allowed) {
  const std::string name = host_name(host_header);
  if (name.empty()) return false;
  for (const auto& a : allowed)
    if (a == "*" || host_name(a) == name) return true;
  const std::string listen = host_name(listen_host);
  if (name == listen) return true;
  if (listen.empty() || listen == "0.0.0.0" || listen == "::")
    return is_ip_literal(name) || name == "localhost";
  if (is_loopback(listen)) return name == "localhost" || name == "127.0.0.1" || name == "::1";
  return false;
}

struct HttpServer::Impl {
  ConnectionServer server{kLimits};
  std::thread thread;
  std::string addr, flag, host;
  int requested_port = 0;
  int port = 0;
  std::function<std::vector<std::string>()> allowed_hosts;
  std::set<std::string> probes;                       // paths served to any Host
  std::set<std::string> posts;                        // paths that take a body
  std::vector<std::pair<std::string, Guard>> guards;  // name, guard
};

HttpServer::HttpServer(const std::string& addr, const std::string& flag,
                       std::function<std::vector<std::string>()> allowed_hosts)
    : impl_(std::make_unique<Impl>()) {
  auto [host, port] = parse_listen_address(addr, flag);
  impl_->addr = addr;
  impl_->flag = flag;
  impl_->host = host;
  impl_->requested_port = port;
  impl_->allowed_hosts = std::move(allowed_hosts);

  httplib::Server& server = impl_->server;
  server.set_payload_max_length(kMaxBody);
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which lets a second daemon bind
  // the same address and the kernel split probes, scrapes and dashboard actions between the two
  // (docs/operations.md, "Connections"). A second bind must fail instead.
  server.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Before any route and before a body is read: the Host rule, then the guards, so an
  // unauthenticated POST is answered without reading what it sends. Routes and guards are all
  // registered before listen(): the handler reads them without a lock.
  Impl& impl = *impl_;
  server.set_pre_routing_handler([&impl](const httplib::Request& req, httplib::Response& res) {
    if ((req.method == "GET" || req.method == "HEAD") && impl.probes.count(req.path))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string requested = req.get_header_value("Host");
    if (!host_allowed(requested, impl.host, impl.allowed_hosts())) {
      log_refusal("http: refused " + req.method + " " + req.path + " from " + req.remote_addr +
                  ": Host '" + requested +
                  "' is not this server's (add it to [http] allowed_hosts if it is)");
      res.status = 403;
      res.set_header("Connection", "close");
      res.set_content("{\"error\":\"Host not allowed\"}", "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Only the routes that take a body have one read (behind the guards below): cpp-httplib
    // reads the body of any POST, PUT, PATCH or DELETE before it finds that nothing serves it.
    if (req.method != "GET" && req.method != "HEAD" &&
        !(req.method == "POST" && impl.posts.count(req.path))) {
      res.status = 405;
      res.set_header("Connection", "close");
      res.set_content("{\"error\":\"method not allowed\"}", "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    for (const auto& [name, guard] : impl.guards) {
      std::string why;
      if (!guard(req, res, why)) continue;
      log_refusal(name + ": refused " + req.method + " " + req.path + " from " + req.remote_addr +
                  ": " + std::to_string(res.status) + " " + why);
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

void HttpServer::probe(const std::string& path, Handler handler) {
  impl_->probes.insert(path);
  impl_->server.Get(path, std::move(handler));
}

void HttpServer::get(const std::string& path, Handler handler) {
  impl_->server.Get(path, std::move(handler));
}

void HttpServer::post(const std::string& path, Handler handler) {
  impl_->posts.insert(path);
  // The body is read here, not by cpp-httplib, which holds only a Content-Length body to the
  // limit: a chunked one was read whole, whatever its size (docs/operations.md, "Bodies").
  impl_->server.Post(
      path, [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader& reader) {
        std::string body;
        bool too_large = false;
        bool read = reader([&](const char* data, std::size_t size) {
          if (body.size() + size > kMaxBody) {
            too_large = true;
            return false;
          }
          body.append(data, size);
          return true;
        });
        if (too_large || (!read && res.status == 413)) {
          res.status = 413;
          res.set_header("Connection", "close");
          res.set_content("{\"error\":\"the body is over 1 MiB\"}", "application/json");
          return;
        }
        if (!read) {
          res.status = 400;
          res.set_header("Connection", "close");
          res.set_content("{\"error\":\"the body could not be read\"}", "application/json");
          return;
        }
        httplib::Request with_body = req;
        with_body.body = std::move(body);
        handler(with_body, res);
      });
}

void HttpServer::guard(const std::string& name, Guard guard) {
  impl_->guards.emplace_back(name, std::move(guard));
}

void HttpServer::bind() {
  if (impl_->port > 0) return;
  httplib::Server& server = impl_->server;
  const char* host = impl_->host.c_str();
  errno = 0;  // what the failed bind() left, for the message (cpp-httplib returns only false)
  if (impl_->requested_port == 0) {
    impl_->port = server.bind_to_any_port(host);
  } else {
    impl_->port = server.bind_to_port(host, impl_->requested_port) ? impl_->requested_port : -1;
  }
  if (impl_->port <= 0) {
    const int err = errno;
    throw Error(ErrorCode::connection, "http",
                impl_->flag + ": cannot listen on " + impl_->addr +
                    (err ? std::string(": ") + std::strerror(err) : std::string()));
  }
}

void HttpServer::listen() {
  bind();
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
}

HttpServer::~HttpServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->server.shutdown_connections();
}

int HttpServer::port() const {
  return impl_->port;
}

}  // namespace outpost::cli
