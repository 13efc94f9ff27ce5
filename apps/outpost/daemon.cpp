// outpost run --config FILE: the daemon, the pipeline host (pipeline_host.h) with every [[relay]]
// of the file (store -> relay -> sink, as `outpost relay`) and every [[consume]] (log -> consumer
// -> sink, as `outpost consume`), each on its own thread, all in one process, with one HTTP
// server ([http] listen). Its reload: reload.cpp.
// outpost check --config FILE: validates the file and exits (0, or 2 naming file, line, key).
//
// Signals: SIGTERM/SIGINT drain every pipeline (a second one gives deliveries in flight up);
// SIGHUP reads the file again: pipelines added are started, removed ones stopped (drained),
// changed ones drained and started with the new settings, unchanged ones keep running; the
// admin token changes at once; [http] listen needs a restart (said in the log). A file that does
// not validate is refused and everything keeps running as it was.
// systemd: with NOTIFY_SOCKET set, READY=1 once every pipeline has started (Type=notify),
// RELOADING=1/READY=1 around a reload, STOPPING=1 when draining.

#ifdef OUTPOST_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <iostream>
#include <string>

#include "cli.h"
#include "config.h"
#include "listen_address.h"
#include "log.h"
#include "pipeline_host.h"

namespace outpost::cli {
namespace {

void notify(const std::string& state) {
#ifdef OUTPOST_HAVE_SYSTEMD
  sd_notify(0, state.c_str());
#else
  (void)state;
#endif
}

// URLs from the file are redacted like URLs given as flags.
void register_secrets(const DaemonConfig& config) {
  for (const auto& r : config.relays) {
    add_secret_url(r.store);
    add_secret_url(r.sink);
  }
  for (const auto& c : config.consumers) {
    add_secret_url(c.args.from);
    add_secret_url(c.args.checkpoint);
    add_secret_url(c.args.sink);
  }
}

// [http] listen's host resolves, as --metrics does (listen_address.h): a name that does not is
// exit 2 naming the file and the host, before anything is opened (run) or at check.
void resolve_http_listen(const DaemonConfig& config) {
  if (!config.http.listen.empty())
    resolve_listen_address(config.http.listen, config.file + ": [http] listen");
}

int run_daemon(const std::string& file, const std::string& log_format) {
  DaemonConfig config = load_config(file);
  resolve_http_listen(config);  // before any pipeline opens its store
  set_log_format("outpost run", log_format.empty() ? config.log_format : log_format);
  register_secrets(config);

  PipelineHost::Options options;
  options.daemon = true;
  options.file = config.file;
  options.listen = config.http.listen;
  options.listen_name = "[http] listen";
  options.serving_line = [](const std::string& host, int port) {
    return "http on " + host + ":" + std::to_string(port) + " (/metrics /healthz /readyz)";
  };
  options.notify = notify;
  PipelineHost* running = nullptr;
  // SIGHUP: the file again; one that does not validate changes nothing.
  options.on_hangup = [&running, &config] {
    notify("RELOADING=1");
    DaemonConfig next;
    try {
      next = load_config(config.file);
    } catch (const std::exception& e) {
      log("reload refused, still running the previous configuration: " + std::string(e.what()));
      notify("READY=1");
      return;
    }
    register_secrets(next);
    if (next.http.listen != config.http.listen)
      log("reload: [http] listen changed to '" + next.http.listen +
          "': needs a restart (still serving on '" + config.http.listen + "')");
    running->reload(next);
    notify("READY=1");
  };
  PipelineHost host(options);
  running = &host;
  host.set_http(config.http);
  host.open_and_start(config.pipelines());
  const auto count = std::to_string(config.pipelines().size());
  log("started " + count + " pipeline(s) from " + file);
  notify("READY=1\nSTATUS=" + count + " pipeline(s) running");
  return host.run();
}

}  // namespace

Runner add_run_command(CLI::App& root) {
  auto file = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>();
  CLI::App* sub = root.add_subcommand(
      "run",
      "Run the daemon: every [[relay]] and [[consume]] pipeline of a TOML config file in one\n"
      "process, with /metrics, /healthz and /readyz on [http] listen. SIGTERM/SIGINT drain,\n"
      "SIGHUP reloads.\n"
      "Reference: docs/operations.md.");
  sub->add_option("--config", *file, "TOML config file")->required();
  sub->add_option("--log-format", *format,
                  "text (default) or json: one JSON object per line ([log] format in the file)")
      ->check(CLI::IsMember({"text", "json"}));
  return [file, format] { return run_daemon(*file, *format); };
}

Runner add_check_command(CLI::App& root) {
  auto file = std::make_shared<std::string>();
  CLI::App* sub = root.add_subcommand(
      "check",
      "Validate a daemon config file without opening or starting anything: exit 0, or 2 with\n"
      "a message naming the file, line and key.");
  sub->add_option("--config", *file, "TOML config file")->required();
  return [file] {
    DaemonConfig config = load_config(*file);
    resolve_http_listen(config);
    std::cout << config.file << ": ok (" << config.pipelines().size() << " pipeline(s):";
    for (const auto& p : config.pipelines()) std::cout << " " << pipeline_name(p);
    std::cout << (config.http.listen.empty() ? "; no http" : "; http " + config.http.listen) << ")"
              << std::endl;
    return kExitOk;
  };
}

}  // namespace outpost::cli
