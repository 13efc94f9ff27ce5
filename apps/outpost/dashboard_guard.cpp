#include "dashboard_guard.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace outpost::cli {

namespace {

// Same-origin JSON only; see dashboard.h.
std::string cross_site_reason(const httplib::Request& req) {
  if (req.has_header("Sec-Fetch-Site")) {
    auto site = req.get_header_value("Sec-Fetch-Site");
    if (site != "same-origin" && site != "none") return "Sec-Fetch-Site: " + site;
  }
  if (req.has_header("Origin")) {
    auto origin = req.get_header_value("Origin");
    auto host = req.get_header_value("Host");
    if (origin != "http://" + host && origin != "https://" + host) return "Origin " + origin;
  }
  auto type = req.get_header_value("Content-Type");
  if (type.rfind("application/json", 0) != 0) return "Content-Type must be application/json";
  return {};
}

}  // namespace

// The mutation guard of dashboard.h. No token given and a wrong token are told apart (both
// 401, as RFC 6750 has it: `WWW-Authenticate: Bearer` alone, or with error="invalid_token"): an
// operator who typed nothing is asked for the token, one who typed a wrong one is told so.
Refusal refuse_mutation(const httplib::Request& req, const std::string& token) {
  if (auto reason = cross_site_reason(req); !reason.empty())
    return {403, "cross_site", "cross-site request refused (" + reason + ")"};
  if (token.empty())
    return {403, "read_only", "read-only: no admin token is configured ([http] admin_token)"};
  // "Bearer TOKEN" (the scheme in any case); a header without credentials, or none, is no token.
  std::string auth = req.get_header_value("Authorization");
  auto trim = [](std::string& t) {
    t.erase(0, std::min(t.size(), t.find_first_not_of(" \t")));
    t.erase(std::min(t.size(), t.find_last_not_of(" \t") + 1));
  };
  trim(auth);
  std::string scheme = auth.substr(0, auth.find(' '));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool bearer = scheme == "bearer";
  std::string given = bearer ? auth.substr(scheme.size()) : std::string();
  trim(given);
  if (auth.empty() || (bearer && given.empty()))
    return {401, "token_required",
            "admin token required: this change needs the admin token ([http] admin_token) as "
            "Authorization: Bearer TOKEN"};
  // Constant-time comparison: the token is a secret.
  bool same = bearer && given.size() == token.size();
  unsigned char diff = 0;
  for (std::size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(token[i] ^ (i < given.size() ? given[i] : 0));
  if (!same || diff != 0)
    return {401, "token_wrong",
            "wrong admin token: the token given is not [http] admin_token (Authorization: "
            "Bearer TOKEN)"};
  return {};
}

void refuse(httplib::Response& res, const Refusal& r) {
  if (r.status == 401)
    res.set_header("WWW-Authenticate", r.code == "token_wrong"
                                           ? "Bearer realm=\"outpost\", error=\"invalid_token\""
                                           : "Bearer realm=\"outpost\"");
  res.status = r.status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(nlohmann::json{{"error", r.why}, {"code", r.code}}.dump(), "application/json");
}

}  // namespace outpost::cli
