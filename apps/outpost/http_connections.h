#pragma once
// The connections of the HTTP server (http_server.h): a cpp-httplib server whose connections
// hold a serving thread only while a request that has arrived is served (docs/operations.md,
// "HTTP endpoints", Connections). cpp-httplib gives each accepted connection a pool thread that
// then waits for its request; a read times out only when no byte comes for the read timeout, so
// clients that trickle a byte every few seconds, one more than there are threads, took every
// thread for as long as they liked and /healthz went unanswered. Here one thread waits (poll) on
// every connection until a request's head (request line and headers) has arrived, within a
// deadline from the connection (or, kept alive, from its next request's first byte), and only
// then hands it to a serving thread; the body must arrive before the same deadline. Connections
// over the caps (in all, and from one peer address) are closed at once.

#include <httplib.h>

#include <chrono>
#include <memory>

namespace outpost::cli {

class ConnectionServer : public httplib::Server {
 public:
  struct Limits {
    std::size_t threads;                         // serving threads
    std::size_t max_connections;                 // open connections in all
    std::size_t max_per_peer;                    // open connections from one address
    std::chrono::milliseconds request_deadline;  // head and body of one request
    std::chrono::milliseconds read_timeout;      // one read (of a body) without a byte
    std::chrono::milliseconds write_timeout;     // one write
    std::chrono::milliseconds keep_alive;        // idle between requests
    std::size_t keep_alive_requests;             // requests per connection
  };
  explicit ConnectionServer(const Limits& limits);
  ~ConnectionServer() override;
  // Closes every connection and joins the threads; after the listening thread returned.
  void shutdown_connections();

 private:
  // Called by cpp-httplib on its listening thread for each accepted socket (through a task queue
  // that runs it there): admits it to the waiting connections or closes it at once.
  bool process_and_close_socket(socket_t sock) override;
  // One request of a connection whose head has arrived (cpp-httplib's parsing and routing).
  bool serve(httplib::Stream& stream, bool close_connection, bool& connection_closed);

  struct State;
  std::unique_ptr<State> state_;
  friend struct State;
};

}  // namespace outpost::cli
