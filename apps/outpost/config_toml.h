#pragma once
// The TOML file's text as messages may show it (config.cpp): where a value is, an integer as
// written, toml11's errors without the source lines they quote, and the UTF-8 check that runs
// before toml11 sees the text.

#include <cstddef>
#include <string>
#include <toml.hpp>

namespace outpost::cli {

// "FILE:LINE: " for a value of the parsed file.
std::string at(const std::string& file, const toml::value& v);
// An integer value as the file wrote it: toml11 saturates one beyond the 64-bit range at its
// limit, which a message must not show as if the user had written it.
std::string integer_as_written(const toml::value& v);
// toml11's error text without the source lines it quotes: the quoted line may hold a secret
// (`store = "redis://PASSWORD@host"`, `admin_token = "..."`), and an error message must never
// print one (docs/cli.md, "Secrets").
std::string toml_error_without_source(const std::string& what);
// Offset of the first byte that is not valid UTF-8, or npos.
std::size_t invalid_utf8_at(const std::string& s);

}  // namespace outpost::cli
