#pragma once
// The HTTP server of `outpost relay --metrics ADDR`, `outpost consume --metrics ADDR` and the
// daemon's [http] listen: one small cpp-httplib server on its own thread, 127.0.0.1 unless told
// otherwise, hardened for a port an operator's browser can reach (docs/operations.md, "HTTP
// endpoints"). It owns the listening socket, the budget and the rules every route gets; the
// routes are registered by their owners before listen():
//   /metrics            metrics.h (Prometheus text)
//   /healthz, /readyz   health.h (liveness and readiness)
//   /, /api/...         dashboard.h (the operator dashboard and its JSON API)
// The rules: probes (/metrics, /healthz, /readyz) carry no event data and answer any Host, so a
// scraper or probe that names the server by a DNS name keeps working; every other request is
// refused (403) unless its Host is the listen address, localhost (on a loopback address) or an
// allowed name (DNS rebinding: a page that rebinds its name to 127.0.0.1 would otherwise read
// dead letters' payloads). Guards (the dashboard's mutation token) run before routing and before
// a body is read; bodies are bounded; a bounded pool of connections with read timeouts keeps
// /healthz answering beside slow clients. Refusals are logged, thinned out like delivery errors.

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace outpost::cli {

class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // True when the request is refused, with the reply written to the response and the reason in
  // the string (for the log line).
  using Guard = std::function<bool(const httplib::Request&, httplib::Response&, std::string& why)>;

  // `addr` is HOST:PORT (port 0 picks a free one). Throws ConfigError for a malformed address
  // (naming `flag`). `allowed_hosts` gives the names served besides the listen address and
  // localhost ("*": any), asked on each request (a reload may change them). Serves nothing until
  // listen().
  HttpServer(const std::string& addr, const std::string& flag,
             std::function<std::vector<std::string>()> allowed_hosts);
  ~HttpServer();  // stops serving and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes, before listen(). A probe is a GET served to any Host; get/post routes only to this
  // server's names.
  void probe(const std::string& path, Handler handler);
  void get(const std::string& path, Handler handler);
  void post(const std::string& path, Handler handler);
  // A check of every request that is not a probe, after the Host rule and before its body is
  // read; `name` starts its refusals' log lines ("dashboard: refused POST ...").
  void guard(const std::string& name, Guard guard);

  // Binds the address (and keeps it: connections wait in the backlog until listen()). Throws
  // Error(connection) naming the address and why when it cannot bind.
  void bind();
  // Binds (unless bind() did) and serves on its own thread.
  void listen();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether a request's Host header names this server: `listen_host` (the host of HOST:PORT),
// localhost names when that is a loopback address, any IP address when it is a wildcard one
// (0.0.0.0, ::), or one of `allowed` ("*": any). The port is not compared: a rebinding page
// differs in its name.
bool host_allowed(const std::string& host_header, const std::string& listen_host,
                  const std::vector<std::string>& allowed);

}  // namespace outpost::cli
