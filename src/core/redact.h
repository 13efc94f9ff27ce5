#pragma once
// Keeping secrets out of everything outpost prints: error messages, log lines, metrics and the
// relay summary. One rule decides what is secret in a URL (docs/cli.md, "Secrets"):
//   - the password of the userinfo: scheme://user:PASSWORD@host;
//   - a userinfo without a colon, except for postgresql:// (where it is the role name):
//     redis://PASSWORD@host, redis-stream://PASSWORD@host, nats://TOKEN@host, https://TOKEN@host;
//   - the value of every query parameter whose name is secret (is_secret_name): sasl.password,
//     ssl.key.password, header.Authorization, token, api_key, client_secret, ...
// redact_url() applies the rule to a URL; Redactor applies it to free text (a backend's own
// error text may quote a value it was given) by replacing the secret values of known URLs.

#include <string>
#include <string_view>
#include <vector>

namespace outpost::core {

inline constexpr std::string_view kRedacted = "***";

// True for parameter names that carry credentials: any name containing password, passwd,
// secret, token, authorization, credential, cookie, apikey/api_key/api-key (case-insensitive),
// and librdkafka's sasl.oauthbearer.config and ssl.key.pem.
bool is_secret_name(std::string_view name);

// `url` with every secret part replaced by "***". Works on any text, also one that is not a valid
// URL (it is used in the messages that say so), and never throws. When in doubt it hides more.
std::string redact_url(std::string_view url);

// The secret values of `url` as they may appear in text: raw and percent-decoded. Empty when the
// URL has none.
std::vector<std::string> url_secrets(std::string_view url);

// Free-text redaction against known URLs: every occurrence of a given URL becomes its
// redact_url() form, and every secret value of it becomes "***". Values shorter than
// kMinScrubbedLength are left in free text (replacing every "a" would garble messages); they are
// still hidden inside URLs. Thread-safe for concurrent redact() once filled.
class Redactor {
 public:
  static constexpr std::size_t kMinScrubbedLength = 3;

  void add_url(std::string_view url);
  std::string redact(std::string_view text) const;
  bool empty() const { return urls_.empty() && secrets_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>> urls_;  // raw URL, redacted form
  std::vector<std::string> secrets_;                       // longest first
};

}  // namespace outpost::core
