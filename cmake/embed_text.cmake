# cmake -DIN=FILE -DOUT=HEADER -DNAME=kIdentifier -P embed_text.cmake
# Writes HEADER with `inline constexpr std::string_view NAME = R"...(<FILE>)...";`, so a text file
# (the dashboard page) is compiled into the program and needs no file at run time.
file(READ ${IN} text)
string(FIND "${text}" ")_embed_\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string delimiter")
endif()
file(WRITE ${OUT}.tmp "// Generated from ${IN} by cmake/embed_text.cmake; do not edit.\n#pragma once\n#include <string_view>\ninline constexpr std::string_view ${NAME} = R\"_embed_(${text})_embed_\";\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
