// HOST:PORT of --metrics and [http] listen (listen_address.h).

#include "listen_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string_view>

#include "outpost/error.h"

namespace outpost::cli {
namespace {

// True for an IPv4 or IPv6 literal or a host name (RFC 1123 labels; a name whose last label is
// all digits is a malformed IPv4 address such as 256.1.1.1, not a name). Checked before anything
// is opened, so a bad --metrics address is a usage error that creates nothing.
bool valid_listen_host(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1)
    return true;
  if (host.empty() || host.size() > 253) return false;
  std::size_t start = 0;
  bool last_all_digits = false;
  while (start <= host.size()) {
    auto end = host.find('.', start);
    if (end == std::string::npos) end = host.size();
    auto label = std::string_view(host).substr(start, end - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    if (!std::all_of(label.begin(), label.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
        }))
      return false;
    last_all_digits = std::all_of(label.begin(), label.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    start = end + 1;
  }
  return !last_all_digits;
}

}  // namespace

ListenAddress parse_listen_address(const std::string& addr, const std::string& flag) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    throw ConfigError(flag + " '" + addr + "' must be HOST:PORT, e.g. 127.0.0.1:9100");
  ListenAddress out;
  out.host = addr.substr(0, colon);
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);
  auto ps = addr.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(ps.data(), ps.data() + ps.size(), out.port);
  if (ec != std::errc{} || ptr != ps.data() + ps.size() || out.port < 0 || out.port > 65535)
    throw ConfigError(flag + " '" + addr + "': port '" + ps + "' is not 0-65535");
  if (!valid_listen_host(out.host))
    throw ConfigError(flag + " '" + addr + "': host '" + out.host +
                      "' is not an IPv4 or IPv6 address or a host name");
  return out;
}

ListenAddress resolve_listen_address(const std::string& addr, const std::string& flag) {
  ListenAddress out = parse_listen_address(addr, flag);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(out.port);
  int rc = getaddrinfo(out.host.c_str(), port.c_str(), &hints, &found);
  if (found) freeaddrinfo(found);
  if (rc != 0)
    throw ConfigError(flag + " '" + addr + "': host '" + out.host + "' does not resolve (" +
                      gai_strerror(rc) + ")");
  return out;
}

}  // namespace outpost::cli
