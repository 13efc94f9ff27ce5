#pragma once
// The operator dashboard served at / by the HTTP server (metrics.h), and its JSON API:
//   GET  /                    the page (HTML/JS/CSS embedded at build time, no external assets)
//   GET  /api/overview        pipelines: state, counters, backlog, oldest age, dead count; a
//                             consume pipeline's group: position, lag, dead letters, counters
//   GET  /api/dead?pipeline=P&type=&key=&error=&limit=   dead letters matching the filter
//                             (type exact, key and error text substring), with payload/headers
//   GET  /api/blocked?pipeline=P&limit=   keys whose head event failed (Store::blocked): error,
//                             attempts, next attempt, or the lease of the attempt in flight
//   GET  /api/leases?pipeline=P&limit=    events under a live lease (Store::leased), grouped by
//                             the claim holding them: owner, fence, keys, expiry
//   GET  /api/consumer/dead?pipeline=P&limit=   a consume pipeline's group's dead letters
//   POST /api/consumer/dead/retry|discard  {"pipeline":P,"ids":[row or event ids]}
//   POST /api/dead/retry      {"pipeline":P,"ids":[...]} or
//   POST /api/dead/discard    {"pipeline":P,"filter":{...},"expect":N}: every match, only if
//                             there are still exactly N (the count the operator confirmed)
// Mutations need `Authorization: Bearer <admin token>` ([http] admin_token); without a
// configured token the dashboard is read-only (403). Cross-site requests are refused (403): a
// mutation must be a same-origin JSON POST (Origin, if sent, equals the Host; Sec-Fetch-Site, if
// sent, is same-origin/none; Content-Type application/json, which a cross-site form cannot send
// without a CORS preflight this server never grants).

#include <string>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace outpost::cli {

class PipelineSource;
void add_dashboard_routes(httplib::Server& server, PipelineSource& source);
// The mutation guard above for a POST to /api/..., run before its body is read (the server's
// pre-routing handler): true when it is refused, with the reply written to `res` and the reason
// in `why`. Each mutation that passes is logged by its route (pipeline, ids or filter, count,
// remote address).
bool refuse_before_body(const httplib::Request& req, httplib::Response& res, PipelineSource& source,
                        std::string& why);

}  // namespace outpost::cli
