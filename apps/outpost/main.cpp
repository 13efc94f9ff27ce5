// outpost: the command line and daemon. One file per subcommand (emit.cpp, relay.cpp,
// events.cpp, bench.cpp); this file wires them up and maps errors to exit codes:
// 0 ok, 2 usage/config error (the message names the flag or URL part), 1 runtime failure.

#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "cli.h"
#include "core/edit_distance.h"
#include "log.h"
#include "outpost/error.h"
#include "outpost/factory.h"

#ifndef OUTPOST_VERSION
#define OUTPOST_VERSION "unknown"
#endif

namespace outpost::cli {

std::string supported_schemes_text() {
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  return "Store URL schemes in this build: " + join(store_schemes()) +
         "\nSink URL schemes in this build: " + join(sink_schemes());
}

// The one rule for integer flags (--batch, --limit, --lease-ms, --events, ... of every command):
// decimal digits, with a leading '-' only for signed flags, as the URL parser reads integer
// parameters (core::Url::int_param). CLI11 alone reads integers with strtoll(…, 0), so '0x10'
// was 16, '010' was 8 and ' 5' or '+5' passed. The value is handed on in canonical form, so
// CLI11's own conversion and the flag's range check see the number that was written.
CLI::Validator decimal_integer(bool is_signed) {
  return CLI::Validator(
      [is_signed](std::string& text) -> std::string {
        const char* begin = text.data();
        const char* end = begin + text.size();
        std::string canonical;
        std::from_chars_result r{};
        if (is_signed) {
          std::int64_t n = 0;
          r = std::from_chars(begin, end, n);
          canonical = std::to_string(n);
        } else {
          std::uint64_t n = 0;
          r = (begin != end && *begin == '-')
                  ? std::from_chars_result{begin, std::errc::invalid_argument}
                  : std::from_chars(begin, end, n);
          canonical = std::to_string(n);
        }
        if (r.ec == std::errc::result_out_of_range) return "'" + text + "' is out of range";
        if (r.ec != std::errc{} || r.ptr != end)
          return "must be a " + std::string(is_signed ? "" : "non-negative ") +
                 "decimal integer, got '" + text + "'";
        text = canonical;
        return {};
      },
      "", "decimal integer");
}

void require_decimal_integers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    std::string type = opt->get_type_name();
    bool is_signed = type.rfind("INT", 0) == 0;
    if (is_signed || type.rfind("UINT", 0) == 0) opt->transform(decimal_integer(is_signed));
  }
  for (CLI::App* sub : app.get_subcommands({})) require_decimal_integers(*sub);
}

// The commands that take SIGINT/SIGTERM themselves (with a StopSignalWatcher) to drain.
bool handles_stop_signals(const std::string& command) {
  return command == "relay" || command == "consume" || command == "demo" || command == "run";
}

// True when stdout is a pipe or socket whose reader went away (`outpost ... | head -1` after
// head exited): poll reports POLLERR/POLLHUP on such a write end.
static bool stdout_reader_gone() {
  struct stat st {};
  if (fstat(1, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return false;
  pollfd p{1, POLLOUT, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

// One rule for every command's output (docs/cli.md, "Exit codes"): SIGPIPE is ignored
// (signals.cpp), so a reader that went away is a failed write here, which ends the command
// quietly with its own code, as a pipeline's consumer expects; any other failed write (a full
// disk) is a runtime failure, since output was lost.
static int finish_stdout(int code) {
  std::cout.flush();
  const bool failed = std::cout.fail() || std::fflush(stdout) != 0;
  if (!failed || stdout_reader_gone()) return code;
  std::cerr << "outpost: error: writing standard output failed (output is incomplete)\n";
  return code == kExitOk ? kExitRuntime : code;
}

}  // namespace outpost::cli

// An error message for stderr: redacted, and each of its lines with its control characters
// escaped, since it quotes what the user, a config file or a server gave (a URL, a pipeline
// name, a key): an escape sequence there must not reach the operator's terminal
// (docs/operations.md, "Logs"). Its own line breaks (one problem a line) are kept.
static std::string printable(const std::string& text) {
  std::string out, line;
  std::istringstream in(outpost::cli::redact(text));
  bool first = true;
  while (std::getline(in, line)) {
    out += (first ? "" : "\n") + outpost::cli::escape_controls(line);
    first = false;
  }
  if (!text.empty() && text.back() == '\n') out += '\n';
  return out;
}

int main(int argc, char** argv) {
  using namespace outpost::cli;
  // Before anything else, and before any thread exists (cli.h): a stop signal from now on waits
  // for the command that handles it instead of killing the process half started, and a pipe
  // whose reader went away is an error of the pipeline writing to it, not the end of the process.
  set_process_signal_policy();
  register_secret_sources(argc, argv);
  CLI::App app{"outpost: transactional outbox and relay (emit, relay, inspect, benchmark)"};
  app.name("outpost");
  app.set_version_flag("--version", std::string("outpost ") + OUTPOST_VERSION);
  app.require_subcommand(1, 1);
  app.footer(supported_schemes_text() +
             "\nExit codes: 0 ok, 2 usage or configuration error, 1 runtime failure, 3 relay "
             "--until-empty dead-lettered events.");

  std::map<CLI::App*, Runner> runners;
  auto add = [&](Runner (*fn)(CLI::App&), const char* name) {
    Runner r = fn(app);
    runners[app.get_subcommand(name)] = std::move(r);
  };
  add(add_emit_command, "emit");
  add(add_relay_command, "relay");
  add(add_events_command, "events");
  add(add_bench_command, "bench");
  add(add_run_command, "run");
  add(add_check_command, "check");
  add(add_schema_command, "schema");
  add(add_partitions_command, "partitions");
#ifdef OUTPOST_HAVE_CONSUME
  add(add_consume_command, "consume");
  add(add_consumers_command, "consumers");
  add(add_demo_command, "demo");
#endif
  require_decimal_integers(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; everything else is a usage error.
    std::ostringstream out, err;
    int rc = app.exit(e, out, err);
    std::cout << redact(out.str());
    // CLI11 says "A subcommand is required" for a misspelt command and "--store is required"
    // for a misspelt flag: what was not understood is the error, one block with the documented
    // prefix (docs/cli.md) and the nearest flag of the command.
    std::vector<std::string> extra = app.remaining();
    CLI::App* command = &app;
    for (auto* sub : app.get_subcommands({})) {
      if (sub->parsed()) command = sub;
      for (auto& r : sub->remaining()) extra.push_back(r);
    }
    if (rc == 0) {
      std::cerr << printable(err.str());
      return kExitOk;
    }
    if (extra.empty()) {  // e.g. "--store is required": the documented prefix, the command named
      std::string where;
      for (CLI::App* at = &app;;) {  // the command as typed: "consumers seek: "
        CLI::App* next = nullptr;
        for (auto* sub : at->get_subcommands({}))
          if (sub->parsed()) next = sub;
        if (!next) break;
        where += (where.empty() ? "" : " ") + next->get_name();
        at = next;
      }
      if (!where.empty()) where += ": ";
      std::cerr << printable("outpost: error: " + where + e.what())
                << "\nRun with --help for more information.\n";
      return kExitUsage;
    }
    std::string text = "outpost: error: not understood:";
    for (const auto& x : extra) text += " '" + x + "'";
    for (const auto& x : extra) {
      if (x.rfind("--", 0) != 0) continue;
      std::string best;
      std::size_t best_distance = 3;  // a typo, not another flag
      for (const CLI::Option* opt : command->get_options())
        for (const auto& name : opt->get_lnames()) {
          auto d = outpost::core::edit_distance(x.substr(2, x.find('=') - 2), name);
          if (d < best_distance) best_distance = d, best = "--" + name;
        }
      if (!best.empty()) text += " (did you mean '" + best + "'?)";
      break;
    }
    std::cerr << printable(text) << "\nRun with --help for more information.\n";
    return kExitUsage;
  }

  try {
    for (auto& [sub, run] : runners) {
      if (!sub->parsed()) continue;
      // Commands that stop gracefully take SIGINT/SIGTERM on a watcher thread; for the others
      // the default action applies again (a pending signal ends the process now).
      if (!handles_stop_signals(sub->get_name())) unblock_stop_signals();
      return finish_stdout(run());
    }
    std::cerr << "outpost: no subcommand\n";
    return kExitUsage;
  } catch (const outpost::ConfigError& e) {
    std::cerr << "outpost: error: " << printable(e.what()) << "\n";
    return kExitUsage;
  } catch (const outpost::Error& e) {
    std::cerr << "outpost: error (" << e.backend() << ", " << outpost::to_string(e.code())
              << "): " << printable(e.what()) << "\n";
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::cerr << "outpost: error: " << printable(e.what()) << "\n";
    return kExitRuntime;
  }
}
