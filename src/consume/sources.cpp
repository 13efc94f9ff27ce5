// open_source(): file: is built in; every other scheme comes from the broker source libraries
// linked into the program, which register with the factory (src/sinks/<x>/register_<x>_source.cpp).

#include "consume/sources.h"

#include "outpost/error.h"
#include "outpost/factory.h"

namespace outpost {

std::string Source::position_for(const SeekTarget& target) {
  if (target.kind == SeekTarget::Kind::beginning) return "";
  throw ConfigError("the " + std::string(name()) +
                    " source cannot move a group to an end, a position or a time");
}

std::vector<std::string> source_schemes() {
  std::vector<std::string> schemes{"file"};
  for (auto& s : registered_source_schemes()) schemes.push_back(std::move(s));
  return schemes;
}

std::unique_ptr<Source> open_source(std::string_view text) {
  auto url = core::Url::parse(text);
  if (url.scheme() == "file") return consume::open_file_source(url);
  if (SourceOpener open = find_source_opener(url.scheme())) return open(text);
  std::string list;
  for (const auto& s : source_schemes()) list += (list.empty() ? "" : ", ") + s;
  throw ConfigError("bad source URL '" + url.redacted() + "': scheme '" + url.scheme() +
                    "' is not supported by this build (supported: " + list + ")");
}

}  // namespace outpost
