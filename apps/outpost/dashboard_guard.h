#pragma once
// The dashboard's mutation guard (dashboard.h, "Mutations"): same-origin JSON only, and the admin
// token, no token and a wrong one told apart. Run before a POST's body is read.

#include <string>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace outpost::cli {

// Why a mutation is refused: the HTTP status, a stable code for the page and scripts, the text.
struct Refusal {
  int status = 0;  // 0: not refused
  std::string code, why;
};

// `token`: the configured admin token (empty: the dashboard is read-only).
Refusal refuse_mutation(const httplib::Request& req, const std::string& token);
// Writes the refusal's reply: its status, {"error","code"}, and WWW-Authenticate for a 401.
void refuse(httplib::Response& res, const Refusal& r);

}  // namespace outpost::cli
