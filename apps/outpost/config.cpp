// Loading the daemon's TOML configuration (config.h). toml11 parses; this file knows the keys,
// their limits (the same as the `outpost relay` flags) and words every error with file, line and
// key, because an operator fixing a config file at 3 a.m. needs to know where to look.

#include "config.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>
#include <toml.hpp>

#include "config_toml.h"
#include "core/edit_distance.h"
#include "core/redact.h"
#include "in_process_store.h"
#include "listen_address.h"
#include "log.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "pipeline_limits.h"
#include "pipeline_options.h"
#include "pipeline_settings.h"
#ifdef OUTPOST_HAVE_CONSUME
#include "outpost/consumer.h"
#endif

namespace outpost::cli {
namespace {

// The backoff rule (pipeline_limits.h) in the words of the config file's keys.
std::string backoff_key_error(std::int64_t base_ms, std::int64_t max_ms) {
  return limits::backoff_order_error(base_ms, max_ms, "backoff_base_ms", "key 'backoff_max_ms'");
}

using Value = toml::value;

// The value of the backoff key a wrong order is reported at: backoff_max_ms when the table has
// it, else backoff_base_ms (whose value exceeds the default maximum), else the table.
const Value& backoff_value(const Value& table) {
  const auto& t = table.as_table();
  if (auto it = t.find("backoff_max_ms"); it != t.end()) return it->second;
  if (auto it = t.find("backoff_base_ms"); it != t.end()) return it->second;
  return table;
}

// `what` quotes the file's text (a name, a URL): its control characters are escaped here, so a
// newline in a value cannot break the one-problem-a-line message into forged lines.
[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw ConfigError(where + escape_controls(what));
}

const char* type_name(const Value& v) {
  switch (v.type()) {
    case toml::value_t::boolean:
      return "a boolean";
    case toml::value_t::integer:
      return "an integer";
    case toml::value_t::floating:
      return "a float";
    case toml::value_t::string:
      return "a string";
    case toml::value_t::array:
      return "an array";
    case toml::value_t::table:
      return "a table";
    default:
      return "a date/time";
  }
}

// Reads one table's keys, remembering which were used so that the rest can be reported as
// unknown (a typo must not be silently ignored).
class TableReader {
 public:
  TableReader(const std::string& file, const Value& table, std::string context,
              const EnvLookup& env)
      : file_(file), table_(table), context_(std::move(context)), env_(env) {}

  const Value* find(const std::string& key) {
    seen_.insert(key);
    const auto& t = table_.as_table();
    auto it = t.find(key);
    return it == t.end() ? nullptr : &it->second;
  }
  std::string where(const Value& v, const std::string& key) const {
    return at(file_, v) + context_ + "key '" + key + "': ";
  }
  std::string where_table() const { return at(file_, table_) + context_; }

  // A required key that is missing is reported by reject_unknown(), after any unknown key: a
  // misspelt `sinkk` is first of all a key this table does not have.
  void require(const std::string& key) {
    if (!find(key)) missing_.push_back(key);
  }
  void string(const std::string& key, std::string& out, bool required = false) {
    const Value* v = find(key);
    if (!v) {
      if (required) missing_.push_back(key);
      return;
    }
    if (!v->is_string())
      fail(where(*v, key), std::string("must be a string, got ") + type_name(*v));
    out = expand_env(v->as_string().str, where(*v, key), env_);
  }
  template <typename Int>
  void integer(const std::string& key, Int& out, std::int64_t min, std::int64_t max) {
    const Value* v = find(key);
    if (!v) return;
    if (!v->is_integer())
      fail(where(*v, key), std::string("must be an integer, got ") + type_name(*v));
    auto n = v->as_integer();
    if (n < min || n > max)
      fail(where(*v, key), "must be " + std::to_string(min) + "-" + std::to_string(max) + ", got " +
                               integer_as_written(*v));
    out = static_cast<Int>(n);
  }
  void strings(const std::string& key, std::vector<std::string>& out) {
    const Value* v = find(key);
    if (!v) return;
    if (!v->is_array())
      fail(where(*v, key), std::string("must be an array of strings, got ") + type_name(*v));
    for (const auto& item : v->as_array()) {
      if (!item.is_string())
        fail(where(item, key),
             std::string("must be an array of strings, got ") + type_name(item) + " in it");
      out.push_back(expand_env(item.as_string().str, where(item, key), env_));
    }
  }
  void boolean(const std::string& key, bool& out) {
    const Value* v = find(key);
    if (!v) return;
    if (!v->is_boolean())
      fail(where(*v, key), std::string("must be true or false, got ") + type_name(*v));
    out = v->as_boolean();
  }
  // Every key not read is an error, reported first on a line of its own with the known key it
  // is closest to (or `hint`'s word on it), then each required key that is missing, one a line.
  void reject_unknown(const std::function<std::string(const std::string&)>& hint) {
    std::vector<std::pair<std::uint_least32_t, std::string>> unknown;
    for (const auto& [key, v] : table_.as_table())
      if (!seen_.count(key)) unknown.emplace_back(v.location().line(), key);
    std::string text;
    if (!unknown.empty()) {
      std::sort(unknown.begin(), unknown.end());
      const auto& [line, key] = unknown.front();
      std::string why = hint ? hint(key) : "";
      std::string guess = why.empty() ? nearest_key(key) : "";
      text = file_ + ":" + std::to_string(line) + ": " + context_ + "unknown key '" +
             escape_controls(key) + "'" +
             (!why.empty()     ? ": " + why
              : !guess.empty() ? " (did you mean '" + guess + "'?)"
                               : "");
    }
    for (const auto& key : missing_)
      text += (text.empty() ? "" : "\n") + where_table() + "key '" + key + "' is required";
    if (!text.empty()) throw ConfigError(text);
  }

 private:
  // The key of this table nearest to `key` by edit distance, if it is near enough to be a typo
  // of it (one edit, two for longer keys); empty otherwise.
  std::string nearest_key(const std::string& key) const {
    const std::size_t limit = key.size() >= 6 ? 2 : 1;
    std::string best;
    std::size_t best_distance = limit + 1;
    for (const auto& known : seen_) {
      std::size_t d = core::edit_distance(key, known);
      if (d < best_distance) best_distance = d, best = known;
    }
    return best;
  }
  const std::string& file_;
  const Value& table_;
  std::string context_;
  const EnvLookup& env_;
  std::set<std::string> seen_;
  std::vector<std::string> missing_;  // required keys not found, in the order they were read
};

// Reads the keys of a pipeline table from its settings table (pipeline_settings.h): the keys,
// types, limits and choices of the flags.
template <class C>
void read_settings(TableReader& r, C& into, const std::vector<Setting<C>>& rows) {
  for (const auto& s : rows) {
    const std::string key(s.key);
    std::visit(
        [&](auto field) {
          auto& value = into.*field;
          using T = std::remove_reference_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            r.boolean(key, value);
          } else if constexpr (std::is_same_v<T, std::string>) {
            r.string(key, value, s.required);
            const auto choices = s.choice_list();
            if (const Value* v = r.find(key);
                v && !choices.empty() &&
                std::find(choices.begin(), choices.end(), value) == choices.end()) {
              std::string list;
              for (const auto& c : choices) list += (list.empty() ? "'" : ", '") + c + "'";
              fail(r.where(*v, key), "must be one of " + list + ", got '" + value + "'");
            }
          } else {
            r.integer(key, value, s.min, s.max);
          }
        },
        s.field);
  }
}

// "[[relay]] 'orders': ", or "[[relay]] #2: " before the table's name is known.
std::string table_context(const std::string& kind, std::size_t index, const std::string& name) {
  return "[[" + kind + "]] " + (name.empty() ? "#" + std::to_string(index + 1) : "'" + name + "'") +
         ": ";
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

std::string scheme_of(const std::string& url) {
  auto colon = url.find(':');
  if (colon == std::string::npos) return {};
  std::string s = url.substr(0, colon);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The scheme must be one this build has; the URL itself is checked when it is opened.
void check_scheme(const std::string& where, const std::string& url, const char* what,
                  const std::vector<std::string>& schemes) {
  std::string scheme = scheme_of(url);
  if (std::find(schemes.begin(), schemes.end(), scheme) != schemes.end()) return;
  std::string list;
  for (const auto& s : schemes) list += (list.empty() ? "" : ", ") + s + ":";
  fail(where,
       std::string(scheme.empty() ? "missing scheme" : "unsupported scheme '" + scheme + ":'") +
           " in the " + what + " URL; this build supports " + list);
}

// The valid `name` of a [[kind]] table, or empty when it has none (the table's reader reports
// that, after any unknown key).
std::string read_name(const std::string& file, const Value& table, const std::string& kind,
                      std::size_t index, const EnvLookup& env) {
  std::string name;
  TableReader probe(file, table, table_context(kind, index, ""), env);
  if (!probe.find("name")) return name;
  probe.string("name", name);
  if (!valid_name(name))
    fail(at(file, table) + table_context(kind, index, ""),
         "key 'name': '" + name + "' must be 1-64 characters of A-Z a-z 0-9 _ - .");
  return name;
}

// Hints for an unknown key of a pipeline table.
std::string pipeline_key_hint(const std::string& key) {
  if (key == "metrics") return "the daemon has one HTTP server for every pipeline: [http] listen";
  if (key == "log_format") return "the daemon's log format is [log] format";
  if (key.find('-') != std::string::npos) {
    std::string underscored = key;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    return "write it with '_': " + underscored;
  }
  return "";
}

// The part every pipeline table shares: its name (checked), the context of its messages ("[[relay]]
// 'orders': "), its settings read from the settings table, and no unknown or missing key. The
// reader is returned for the kind's own checks.
template <class C>
TableReader read_pipeline_table(const std::string& file, const Value& table,
                                const std::string& kind, std::size_t index, const EnvLookup& env,
                                std::string& name, std::string& context, C& into,
                                const std::vector<Setting<C>>& rows) {
  name = read_name(file, table, kind, index, env);
  context = table_context(kind, index, name);
  TableReader r(file, table, context, env);
  r.require("name");
  read_settings(r, into, rows);
  r.reject_unknown(pipeline_key_hint);
  return r;
}

PipelineConfig read_relay(const std::string& file, const Value& table, std::size_t index,
                          const EnvLookup& env) {
  PipelineConfig p;
  p.line = static_cast<int>(table.location().line());
  std::string context;
  TableReader r = read_pipeline_table(file, table, "relay", index, env, p.name, context, p,
                                      relay_settings());  // the flags of `outpost relay`
  if (auto e = backoff_key_error(p.backoff_base_ms, p.backoff_max_ms); !e.empty())
    fail(at(file, backoff_value(table)) + context, e);
  if (auto e = limits::on_dead_error(p.unordered, p.on_dead, "key 'on_dead'", "unordered = true");
      !e.empty())
    fail(at(file, table.as_table().at("on_dead")) + context, e);
  const Value& store = table.as_table().at("store");
  const Value& sink = table.as_table().at("sink");
  check_scheme(r.where(store, "store"), p.store, "store", store_schemes());
  check_scheme(r.where(sink, "sink"), p.sink, "sink", sink_schemes());
  // Every URL of every pipeline is checked here, before `run` opens anything (and by `check`),
  // with the checks the pipeline host makes before it opens one (pipeline_host.h): the URL only,
  // and for a file sink that its directory exists; nothing is opened or created.
  if (auto problem = check_pipeline_urls(p))
    fail(r.where(problem->key == "sink" ? sink : store, problem->key), problem->what);
  if (auto what = in_process_store(p.store); !what.empty())
    fail(r.where(store, "store"),
         what +
             " lives inside the daemon's process: nothing can emit into it (outpost emit and "
             "the application are other processes) and its events are gone at exit; use "
             "sqlite:PATH, postgresql:// or redis://");
  return p;
}

#ifdef OUTPOST_HAVE_CONSUME
ConsumeConfig read_consume(const std::string& file, const Value& table, std::size_t index,
                           const EnvLookup& env) {
  ConsumeConfig c;
  c.line = static_cast<int>(table.location().line());
  ConsumeArgs& a = c.args;
  std::string context;
  TableReader r = read_pipeline_table(file, table, "consume", index, env, c.name, context, a,
                                      consume_settings());  // the flags of `outpost consume`
  const auto& t = table.as_table();
  if (auto e = limits::group_error(a.group); !e.empty()) fail(r.where(t.at("group"), "group"), e);
  if (auto e = backoff_key_error(a.backoff_base_ms, a.backoff_max_ms); !e.empty())
    fail(at(file, backoff_value(table)) + context, e);
  check_scheme(r.where(t.at("from"), "from"), a.from, "log (from)", source_schemes());
  check_scheme(r.where(t.at("sink"), "sink"), a.sink, "sink", sink_schemes());
  if (auto problem = check_pipeline_urls(a))
    fail(r.where(t.at(problem->key), problem->key), problem->what);
  return c;
}
#endif

}  // namespace

std::vector<AnyPipelineConfig> DaemonConfig::pipelines() const {
  std::vector<AnyPipelineConfig> out(relays.begin(), relays.end());
  out.insert(out.end(), consumers.begin(), consumers.end());
  return out;
}

const std::string& pipeline_name(const AnyPipelineConfig& p) {
  return std::visit([](const auto& c) -> const std::string& { return c.name; }, p);
}

bool PipelineConfig::operator==(const PipelineConfig& o) const {
  return name == o.name && same_settings(*this, o, relay_settings());
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (const char* v = std::getenv(name.c_str())) return std::string(v);
    return std::nullopt;
  };
}

std::string expand_env(const std::string& value, const std::string& where, const EnvLookup& env) {
  std::string out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    char c = value[i];
    if (c != '$') {
      out += c;
      continue;
    }
    if (i + 1 < value.size() && value[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (i + 1 >= value.size() || value[i + 1] != '{') {
      out += c;  // a lone $ is kept
      continue;
    }
    auto close = value.find('}', i + 2);
    if (close == std::string::npos) fail(where, "'${' without a closing '}' (write $$ for a $)");
    std::string body = value.substr(i + 2, close - i - 2);
    std::string name = body;
    std::optional<std::string> fallback;
    if (auto dash = body.find(":-"); dash != std::string::npos) {
      name = body.substr(0, dash);
      fallback = body.substr(dash + 2);
    }
    bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                 std::all_of(name.begin(), name.end(), [](char ch) {
                   return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                 });
    if (!valid) fail(where, "'${" + body + "}' is not an environment variable reference");
    auto v = env(name);
    if (fallback && (!v || v->empty())) {
      out += *fallback;
    } else if (!v) {
      fail(where, "environment variable " + name + " is not set (use ${" + name +
                      ":-default} for an optional one)");
    } else {
      out += *v;
    }
    i = close;
  }
  return out;
}

DaemonConfig parse_config(const std::string& text, const std::string& file, const EnvLookup& env) {
  Value root;
  if (auto bad = invalid_utf8_at(text); bad != std::string::npos)
    throw ConfigError(file + ":" +
                      std::to_string(1 + std::count(text.begin(), text.begin() + bad, '\n')) +
                      ": not valid UTF-8 (a TOML file is UTF-8)");
  try {
    std::istringstream in(text);
    root = toml::parse(in, file);
  } catch (const toml::exception& e) {
    // toml11's message quotes the offending source lines; only FILE:LINE and its words are kept.
    throw ConfigError(file + ":" + std::to_string(e.location().line()) +
                      ": not valid TOML: " + toml_error_without_source(e.what()));
  } catch (const std::exception& e) {
    throw ConfigError(file + ": not valid TOML: " + toml_error_without_source(e.what()));
  }
  DaemonConfig config;
  config.file = file;
  TableReader top(file, root, "", env);
  if (const Value* http = top.find("http")) {
    if (!http->is_table()) fail(at(file, *http), "'http' must be a table: [http]");
    TableReader r(file, *http, "[http]: ", env);
    r.string("listen", config.http.listen);
    r.string("admin_token", config.http.admin_token);
    r.strings("allowed_hosts", config.http.allowed_hosts);
    r.reject_unknown(nullptr);
    for (const auto& host : config.http.allowed_hosts)
      if (host.empty() ||
          host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789.-:[]*") != std::string::npos)
        fail(r.where(http->as_table().at("allowed_hosts"), "allowed_hosts"),
             "'" + host + "' is not a host name (letters, digits, '.', '-'; an IP address; or *)");
    if (http->as_table().count("listen") && config.http.listen.empty())
      fail(r.where(http->as_table().at("listen"), "listen"),
           "must be HOST:PORT, got an empty string (leave the key out for no HTTP server)");
    if (!config.http.listen.empty()) {
      // The syntax rule of --metrics too (listen_address.h); the name resolves at run/check.
      try {
        parse_listen_address(config.http.listen, "listen");
      } catch (const ConfigError& e) {
        fail(at(file, http->as_table().at("listen")) + "[http]: ", e.what());
      }
    }
  }
  if (const Value* log = top.find("log")) {
    if (!log->is_table()) fail(at(file, *log), "'log' must be a table: [log]");
    TableReader r(file, *log, "[log]: ", env);
    r.string("format", config.log_format);
    r.reject_unknown(nullptr);
    if (config.log_format != "text" && config.log_format != "json")
      fail(r.where(log->as_table().at("format"), "format"),
           "must be \"text\" or \"json\", got '" + config.log_format + "'");
  }
  // Pipeline names are unique across both kinds: they label metrics and log lines.
  std::set<std::string> names;
  auto unique_name = [&](const Value& table, const std::string& kind, const std::string& name) {
    if (!names.insert(name).second)
      fail(at(file, table) + "[[" + kind + "]] '" + name + "': ",
           "key 'name': a pipeline of this name is already defined");
  };
  if (const Value* relays = top.find("relay")) {
    if (!relays->is_array())
      fail(at(file, *relays), "'relay' must be an array of tables: [[relay]]");
    const auto& array = relays->as_array();
    for (std::size_t i = 0; i < array.size(); ++i) {
      if (!array[i].is_table()) fail(at(file, array[i]), "each relay must be a table: [[relay]]");
      PipelineConfig p = read_relay(file, array[i], i, env);
      unique_name(array[i], "relay", p.name);
      // Relays on one outbox share its events (each event goes to one of them), so two of them
      // with different sinks would split the events between the sinks, not copy them.
      for (const auto& other : config.relays)
        if (other.store == p.store && other.sink != p.sink)
          fail(at(file, array[i].as_table().at("sink")) + "[[relay]] '" + p.name + "': ",
               "key 'sink': relay '" + other.name +
                   "' already delivers this store's events to another sink; relays on one "
                   "outbox share its events, so each sink would get only some of them (to send "
                   "every event to two destinations, relay into a log and consume it twice: "
                   "docs/operations.md)");
      config.relays.push_back(std::move(p));
    }
  }
  if (const Value* consumers = top.find("consume")) {
#ifdef OUTPOST_HAVE_CONSUME
    if (!consumers->is_array())
      fail(at(file, *consumers), "'consume' must be an array of tables: [[consume]]");
    std::set<std::pair<std::string, std::string>> groups;  // (checkpoint, group)
    const auto& array = consumers->as_array();
    for (std::size_t i = 0; i < array.size(); ++i) {
      if (!array[i].is_table())
        fail(at(file, array[i]), "each consume pipeline must be a table: [[consume]]");
      ConsumeConfig c = read_consume(file, array[i], i, env);
      unique_name(array[i], "consume", c.name);
      // Two consumers of one group would each deliver what the other also delivers.
      if (!groups.emplace(c.args.checkpoint, c.args.group).second)
        fail(at(file, array[i].as_table().at("group")) + "[[consume]] '" + c.name + "': ",
             "key 'group': group '" + c.args.group +
                 "' of this checkpoint store is already consumed by another pipeline");
      config.consumers.push_back(std::move(c));
    }
#else
    fail(at(file, *consumers), "[[consume]] needs outpost_consume, which this build does not have");
#endif
  }
  top.reject_unknown([](const std::string&) -> std::string {
    return "the top level has [log], [http], [[relay]] and [[consume]]";
  });
  if (config.relays.empty() && config.consumers.empty())
    fail(file + ": ", "no [[relay]] or [[consume]] pipeline defined");
  return config;
}

DaemonConfig load_config(const std::string& file, const EnvLookup& env) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file + ": cannot read the config file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), file, env);
}

}  // namespace outpost::cli
