// Registers PostgreSQL with the CheckpointStore conformance suite: a fresh table prefix per
// make() in the database of OUTPOST_TEST_PG_URL; cleanup drops the tables through a raw libpq
// connection (the suite's own effects table included).

#include <libpq-fe.h>

#include "checkpoint_cases.h"

namespace {

using outpost::testing::env;

const bool registered = outpost::testing::register_checkpoint_case({
    .name = "postgres",
    .unavailable_reason =
        [] { return env("OUTPOST_TEST_PG_URL") ? std::string() : "OUTPOST_TEST_PG_URL not set"; },
    .make =
        [] {
          std::string base = *env("OUTPOST_TEST_PG_URL");
          std::string prefix = outpost::testing::unique_name("cpconf_");
          std::string sep = base.find('?') == std::string::npos ? "?" : "&";
          return outpost::testing::CheckpointFixture{
              .url = base + sep + "prefix=" + prefix,
              .cleanup =
                  [base, prefix] {
                    PGconn* c = PQconnectdb(base.substr(0, base.find('?')).c_str());
                    PQsetNoticeProcessor(
                        c, [](void*, const char*) {}, nullptr);
                    if (PQstatus(c) == CONNECTION_OK)
                      PQclear(
                          PQexec(c, ("DROP TABLE IF EXISTS " + prefix + "_checkpoints, " + prefix +
                                     "_dead, " + prefix + "_inbox, " + prefix + "_effects")
                                        .c_str()));
                    PQfinish(c);
                  },
          };
        },
});

}  // namespace
