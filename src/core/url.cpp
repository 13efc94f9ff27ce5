#include "core/url.h"

#include <charconv>

#include "core/redact.h"
#include "outpost/error.h"

namespace outpost::core {
namespace {

// Every message shows the URL through redact_url(): a URL that fails to parse may still carry a
// password.
[[noreturn]] void bad(std::string_view url, const std::string& what) {
  throw ConfigError("bad URL '" + redact_url(url) + "': " + what);
}

// A parameter's value as quoted in a message: hidden when the parameter is a secret.
std::string shown_value(std::string_view name, const std::string& value) {
  return is_secret_name(name) ? std::string(kRedacted) : value;
}

int hexv(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hexv(s[i + 1]);
      int lo = hexv(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi << 4 | lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

Url Url::parse(std::string_view text) {
  Url u;
  u.text_ = std::string(text);
  auto colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0)
    bad(u.text_, "missing scheme (expected e.g. sqlite:PATH or postgresql://host/db)");
  u.scheme_ = std::string(text.substr(0, colon));
  for (char& c : u.scheme_) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.'))
      bad(u.text_, "invalid scheme '" + u.scheme_ + "'");
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string_view rest = text.substr(colon + 1);
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.starts_with("//")) {
    u.hierarchical_ = true;
    rest.remove_prefix(2);
    auto slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    // "redis://user:pa/ss@host": a '/' in the userinfo ends the host, so the parse below would
    // read a piece of the password as host or port and connect there. An '@' after the host
    // has no other meaning in the URLs of stores and brokers; web paths may hold one.
    if (slash != std::string_view::npos && !authority.empty() &&
        authority.find('@') == std::string_view::npos &&
        rest.find('@', slash) != std::string_view::npos && u.scheme_ != "http" &&
        u.scheme_ != "https")
      bad(u.text_,
          "'@' after the host: write a '/' in a user name or password as %2F (an '@' in a path as "
          "%40)");
    u.path_ = slash == std::string_view::npos ? "" : percent_decode(rest.substr(slash + 1));
    if (auto at = authority.rfind('@'); at != std::string_view::npos) {
      std::string_view userinfo = authority.substr(0, at);
      authority = authority.substr(at + 1);
      auto pc = userinfo.find(':');
      u.user_ = percent_decode(userinfo.substr(0, pc));
      if (pc != std::string_view::npos) u.password_ = percent_decode(userinfo.substr(pc + 1));
    }
    while (!authority.empty()) {
      auto comma = authority.find(',');
      std::string_view hp = authority.substr(0, comma);
      authority =
          comma == std::string_view::npos ? std::string_view{} : authority.substr(comma + 1);
      HostPort h;
      std::string_view port_text;
      if (hp.starts_with('[')) {  // [ipv6]:port
        auto close = hp.find(']');
        if (close == std::string_view::npos) bad(u.text_, "unterminated '[' in host");
        h.host = std::string(hp.substr(1, close - 1));
        std::string_view after = hp.substr(close + 1);
        if (after.starts_with(':'))
          port_text = after.substr(1);
        else if (!after.empty())
          bad(u.text_, "unexpected text after ']' in host");
      } else {
        auto pc = hp.rfind(':');
        h.host = std::string(hp.substr(0, pc));
        if (pc != std::string_view::npos) port_text = hp.substr(pc + 1);
      }
      if (h.host.empty()) bad(u.text_, "empty host");
      if (!port_text.empty() || hp.ends_with(':')) {
        unsigned port = 0;
        auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
        if (ec != std::errc{} || p != port_text.data() + port_text.size() || port == 0 ||
            port > 65535)
          bad(u.text_, "port '" + std::string(port_text) + "' is not a number in 1-65535");
        h.port = static_cast<std::uint16_t>(port);
      }
      u.hosts_.push_back(std::move(h));
    }
  } else {
    u.path_ = percent_decode(rest);
  }
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (kv.empty()) continue;
    auto eq = kv.find('=');
    std::string k = percent_decode(kv.substr(0, eq));
    std::string v = eq == std::string_view::npos ? "" : percent_decode(kv.substr(eq + 1));
    if (k.empty()) bad(u.text_, "query parameter with an empty name");
    u.query_.emplace_back(std::move(k), std::move(v));
  }
  return u;
}

std::optional<std::string> Url::param(std::string_view name) const {
  known_.emplace(name);
  std::optional<std::string> found;
  for (const auto& [k, v] : query_) {
    if (k != name) continue;
    // Which one was meant cannot be known: a typo must not silently pick one.
    if (found) bad(text_, "parameter '" + std::string(name) + "' is given more than once");
    found = v;
  }
  return found;
}

std::optional<std::int64_t> Url::int_param(std::string_view name, std::int64_t min,
                                           std::int64_t max) const {
  auto v = param(name);
  if (!v) return std::nullopt;
  std::int64_t n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc{} || p != v->data() + v->size() || n < min || n > max)
    bad(text_, "parameter '" + std::string(name) + "' must be an integer in " +
                   std::to_string(min) + ".." + std::to_string(max) + ", got '" +
                   shown_value(name, *v) + "'");
  return n;
}

std::optional<bool> Url::bool_param(std::string_view name) const {
  auto v = param(name);
  if (!v) return std::nullopt;
  if (*v == "1" || *v == "true" || *v == "yes" || *v == "on" || v->empty()) return true;
  if (*v == "0" || *v == "false" || *v == "no" || *v == "off") return false;
  bad(text_, "parameter '" + std::string(name) + "' must be true or false, got '" +
                 shown_value(name, *v) + "'");
}

void Url::reject_unknown() const {
  for (const auto& [k, v] : query_) {
    if (!known_.contains(k)) {
      std::string list;
      for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
      bad(text_, "unknown parameter '" + k + "'" +
                     (list.empty() ? " (this URL takes none)" : " (known: " + list + ")"));
    }
  }
}

std::string Url::host_list(std::uint16_t default_port) const {
  std::string out;
  for (const auto& h : hosts_) {
    if (!out.empty()) out += ',';
    out += h.host.find(':') != std::string::npos ? "[" + h.host + "]" : h.host;
    out += ':' + std::to_string(h.port ? h.port : default_port);
  }
  return out;
}

std::string Url::local_path() const {
  if (!hierarchical_) return path_;
  if (hosts_.size() > 1 || (hosts_.size() == 1 && hosts_[0].host != "localhost"))
    throw ConfigError("bad URL '" + redacted() +
                      "': file: URLs name a local path (file:PATH or file:///PATH), not a host");
  return "/" + path_;
}

std::string Url::redacted() const {
  return redact_url(text_);
}

}  // namespace outpost::core
