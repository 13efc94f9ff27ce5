#pragma once
// The operator dashboard served at / by the HTTP server (http_server.h), and its JSON API
// (docs/dashboard.md):
//   GET  /                    the page (HTML/JS/CSS embedded at build time, no external assets);
//                             each tab at its own URL (#dead?pipeline=P&...), pickers refreshed
//                             from /api/overview
//   GET  /api/overview        pipelines: state, counters, backlog, oldest age, dead count; a
//                             consume pipeline's group: position, lag, dead letters, counters
//   GET  /api/dead?pipeline=P&type=&key=&error=&older_than=&offset=&limit=   the dead letters of
//                             a relay's store or of a consume pipeline's group, in one shape
//                             (dead_letters.h), the matches from offset on, at most limit
//   GET  /api/blocked?pipeline=P&limit=   keys whose head event failed (Store::blocked): error,
//                             attempts, next attempt, or the lease of the attempt in flight
//   GET  /api/leases?pipeline=P&limit=    events under a live lease (Store::leased), grouped by
//                             the claim holding them: owner, fence, keys, expiry
//   GET  /api/consumer/dead   the same as /api/dead
//   POST /api/dead/retry|discard (or /api/consumer/dead/...)  {"pipeline":P,"ids":[...]} (event
//                             ids; a group's: row or event ids) or {"pipeline":P,"filter":{...},
//                             "expect":N}: every match, only if there are still exactly N (the
//                             count the operator confirmed)
//   POST /api/consumer/seek   {"pipeline":P,"to":"beginning|end|POSITION|TIME","reprocess":bool}:
//                             moves a consume pipeline's group (its consumer notices), answers
//                             {"group","source","from","to","reprocess"}
//   POST /api/consumer/delete {"pipeline":P,"group":G} (G typed again): deletes the group's
//                             checkpoint, dead letters and inbox; 409 while the pipeline runs
// Mutations need `Authorization: Bearer <admin token>` ([http] admin_token); without a
// configured token the dashboard is read-only (403). No token and a wrong one are both 401, told
// apart by the body's "code" (token_required, token_wrong) and WWW-Authenticate. Cross-site
// requests are refused (403): a mutation must be a same-origin JSON POST (Origin, if sent, equals
// the Host; Sec-Fetch-Site, if sent, is same-origin/none; Content-Type application/json, which a
// cross-site form cannot send without a CORS preflight this server never grants).

namespace outpost::cli {

class HttpServer;
class PipelineSource;
// Registers the page, the API and the mutation guard above (run before a POST's body is read;
// each mutation that passes is logged by its route: pipeline, ids or filter, count, remote
// address).
void add_dashboard_routes(HttpServer& server, PipelineSource& source);

}  // namespace outpost::cli
