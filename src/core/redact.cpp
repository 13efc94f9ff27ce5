#include "core/redact.h"

#include <algorithm>
#include <cctype>

#include "core/url.h"

namespace outpost::core {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Span {
  std::size_t begin, end;  // [begin, end) of `url`
};

// Where the secrets of `url` are, by the rule in redact.h. Mirrors Url::parse's split (scheme,
// "//" authority up to the first '/', query after '?') but never fails, and treats anything
// before the last '@' of the authority as userinfo, so a password holding '?', '#' or ':' is
// still hidden whole.
std::vector<Span> secret_spans(std::string_view url) {
  std::vector<Span> spans;
  std::size_t pos = 0;  // start of what follows "scheme:"
  std::string scheme;
  if (auto colon = url.find(':'); colon != std::string_view::npos && colon > 0) {
    std::string_view s = url.substr(0, colon);
    if (std::all_of(s.begin(), s.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
        })) {
      scheme = lower(s);
      pos = colon + 1;
    }
  }
  if (!scheme.empty() && url.substr(pos).starts_with("//")) {
    pos += 2;
    auto slash = url.find('/', pos);
    auto authority_end = slash == std::string_view::npos ? url.size() : slash;
    auto at = url.substr(0, authority_end).rfind('@');
    if (at == std::string_view::npos || at < pos) {
      // No '@' before the first '/': a password may hold an unencoded '/' (generated ones often
      // do), which URL parsers read as the end of the host. Take the last '@' before the query
      // as the end of the userinfo then; a path holding '@' (https://h/@team) is hidden with it.
      auto query = url.find('?', pos);
      at = url.substr(0, query == std::string_view::npos ? url.size() : query).rfind('@');
    }
    if (at != std::string_view::npos && at >= pos) {
      std::string_view userinfo = url.substr(pos, at - pos);
      if (auto pc = userinfo.find(':'); pc != std::string_view::npos)
        spans.push_back({pos + pc + 1, at});
      else if (scheme != "postgresql" && scheme != "postgres")
        spans.push_back({pos, at});  // redis://PASSWORD@host, nats://TOKEN@host
      pos = at + 1;
    }
  }
  auto q = url.find('?', pos);
  if (q == std::string_view::npos) return spans;
  for (std::size_t i = q + 1; i < url.size();) {
    auto amp = url.find('&', i);
    auto end = amp == std::string_view::npos ? url.size() : amp;
    auto eq = url.substr(i, end - i).find('=');
    if (eq != std::string_view::npos && eq + 1 < end - i &&
        is_secret_name(percent_decode(url.substr(i, eq))))
      spans.push_back({i + eq + 1, end});
    i = end + 1;
  }
  return spans;
}

}  // namespace

bool is_secret_name(std::string_view name) {
  const std::string n = lower(name);
  for (std::string_view word : {"password", "passwd", "secret", "token", "authorization",
                                "credential", "cookie", "apikey", "api_key", "api-key"})
    if (n.find(word) != std::string::npos) return true;
  return n == "sasl.oauthbearer.config" || n == "ssl.key.pem";
}

std::string redact_url(std::string_view url) {
  std::string out;
  out.reserve(url.size());
  std::size_t done = 0;
  for (const Span& s : secret_spans(url)) {
    out.append(url.substr(done, s.begin - done));
    out.append(kRedacted);
    done = s.end;
  }
  out.append(url.substr(done));
  return out;
}

std::vector<std::string> url_secrets(std::string_view url) {
  std::vector<std::string> out;
  for (const Span& s : secret_spans(url)) {
    std::string_view raw = url.substr(s.begin, s.end - s.begin);
    out.emplace_back(raw);
    if (std::string decoded = percent_decode(raw); decoded != raw) out.push_back(decoded);
    // A userinfo holding '/' is split there by URL parsers, which may quote a piece alone (as a
    // host, a port or a path): each piece is a secret too.
    if (s.end < url.size() && url[s.end] == '@' && raw.find('/') != std::string_view::npos) {
      for (std::size_t b = 0; b <= raw.size();) {
        auto e = std::min(raw.find('/', b), raw.size());
        if (e > b) out.emplace_back(raw.substr(b, e - b));
        b = e + 1;
      }
    }
  }
  return out;
}

void Redactor::add_url(std::string_view url) {
  std::string shown = redact_url(url);
  if (shown == url) return;
  urls_.emplace_back(std::string(url), std::move(shown));
  for (auto& s : url_secrets(url))
    if (s.size() >= kMinScrubbedLength &&
        std::find(secrets_.begin(), secrets_.end(), s) == secrets_.end())
      secrets_.push_back(std::move(s));
  // Longest first, so a secret that contains another is replaced whole.
  std::stable_sort(secrets_.begin(), secrets_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

std::string Redactor::redact(std::string_view text) const {
  std::string out(text);
  auto replace_all = [&out](std::string_view what, std::string_view with) {
    for (auto p = out.find(what); p != std::string::npos; p = out.find(what, p + with.size()))
      out.replace(p, what.size(), with);
  };
  for (const auto& [raw, shown] : urls_) replace_all(raw, shown);
  for (const auto& s : secrets_) replace_all(s, kRedacted);
  return out;
}

}  // namespace outpost::core
