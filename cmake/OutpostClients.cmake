# The C client library behind each optional outpost component, found the same way when outpost
# is built and when a user's find_package(outpost COMPONENTS ...) loads the component (this file
# is installed next to outpostConfig.cmake). One table, so the two cannot disagree.
#
#   outpost_find_client(<component> <found_var> [<target_var>])
# sets <found_var> to TRUE when the component needs no client or its client was found, and
# <target_var> to the client's imported target ("" for none).
include_guard(GLOBAL)

function(outpost_find_client component found_var)
  set(target "")
  if(component STREQUAL "sqlite")
    set(target SQLite::SQLite3)
    if(NOT TARGET ${target})
      find_package(SQLite3 QUIET)
    endif()
  elseif(component STREQUAL "postgres")
    set(target PostgreSQL::PostgreSQL)
    if(NOT TARGET ${target})
      find_package(PostgreSQL QUIET)
    endif()
  elseif(component MATCHES "^(redis|redis_stream|kafka|nats|http)(_source)?$")
    # pkg-config modules: the imported target is PkgConfig::<prefix>.
    # A broker's source (<backend>_source) needs the same client as its sink.
    # libcurl 7.80: curl_url_strerror, with which the HTTP sink checks its URL.
    string(REGEX REPLACE "_source$" "" backend ${component})
    set(modules "redis=HIREDIS:hiredis" "redis_stream=HIREDIS:hiredis" "kafka=RDKAFKA:rdkafka"
                "nats=NATS:libnats" "http=CURL:libcurl>=7.80")
    foreach(entry ${modules})
      if(entry MATCHES "^${backend}=([A-Z]+):(.+)$")
        set(prefix ${CMAKE_MATCH_1})
        set(module ${CMAKE_MATCH_2})
      endif()
    endforeach()
    set(target PkgConfig::${prefix})
    if(NOT TARGET ${target})
      find_package(PkgConfig QUIET)
      if(PKG_CONFIG_FOUND)
        pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})
      endif()
    endif()
  elseif(component STREQUAL "consume")
    # Built with SQLite and/or PostgreSQL (whichever was found): find both, require neither here
    # (the installed targets file names the ones it was built with).
    if(NOT TARGET SQLite::SQLite3)
      find_package(SQLite3 QUIET)
    endif()
    if(NOT TARGET PostgreSQL::PostgreSQL)
      find_package(PostgreSQL QUIET)
    endif()
  endif()
  if(target AND NOT TARGET ${target})
    set(${found_var} FALSE PARENT_SCOPE)
  else()
    set(${found_var} TRUE PARENT_SCOPE)
  endif()
  if(ARGC GREATER 2)
    set(${ARGV2} ${target} PARENT_SCOPE)
  endif()
endfunction()
