// Registers the http: and https: sink scheme when outpost::http is linked in. Programs that link
// the target are linked with --undefined=outpost_register_http (cmake/OutpostLibrary.cmake,
// outpost-http.pc): that keeps this object file, and so the registration, in the program.

#include "outpost/factory.h"
#include "outpost/sinks/http.h"

extern "C" void outpost_register_http() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_sink_scheme("http", &outpost::open_http_sink, &outpost::check_http_sink_url);
  outpost::register_sink_scheme("https", &outpost::open_http_sink, &outpost::check_http_sink_url);
  return true;
}();
}  // namespace
