#pragma once
// HOST:PORT of `relay --metrics` and the daemon's `[http] listen`: one rule for both ([::1]:0
// too; port 0 picks a free one). Kept apart from the HTTP server so the config parser (and its
// fuzz target) checks the same syntax without linking the server.

#include <string>

namespace outpost::cli {

struct ListenAddress {
  std::string host;
  int port = -1;
};

// Syntax only, no network: HOST:PORT with port 0-65535 and a host that is an IPv4/IPv6 literal or
// a host name. Throws ConfigError naming `flag` and the bad part.
ListenAddress parse_listen_address(const std::string& addr, const std::string& flag);

// parse_listen_address, then the host resolved (getaddrinfo, as the bind will): a name that does
// not resolve is a ConfigError naming `flag` and the host. Called before anything is opened, so
// such an address is exit 2 that leaves no database file, table or sink file behind.
ListenAddress resolve_listen_address(const std::string& addr, const std::string& flag);

}  // namespace outpost::cli
