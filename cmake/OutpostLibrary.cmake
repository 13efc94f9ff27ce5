include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/OutpostClients.cmake)

# outpost_library(): one library target of outpost, declared the same way for every layer and
# backend so that each one is built, aliased, registered with the factory and installed alike.
#
#   outpost_library(<target> COMPONENT <component> SOURCES <file>...
#                   [HEADERS <public header>...]      relative to include/ (installed)
#                   [PUBLIC <dep>...] [PRIVATE <dep>...]
#                   [REGISTER])
#
# - The target is a static, position-independent library `outpost_<...>` with the alias and
#   exported name `outpost::<component>` (core, factory, relay, handlers, sqlite, kafka, ...).
# - `src/` is a private include directory: it is on the include path while building outpost
#   (through the build-only `outpost_internal` target) and never in an installed interface.
# - REGISTER: the backend registers its URL scheme(s) with the factory when it is linked in.
#   register_<component>.cpp, in the folder of the CMakeLists.txt that declares the target (the
#   backend's own folder), holds a static registration object and the function
#   `outpost_register_<component>`; every program that links the target is linked with
#   `--undefined=outpost_register_<component>`, so the linker keeps that object file from the
#   archive (nothing else references it) and the scheme is there. Programs that do not link a
#   backend do not get it, nor its client library.
# - Installed into the export set `outpost-<component>-targets` (cmake/outpostConfig.cmake.in
#   loads one set per requested component) when OUTPOST_INSTALL is on.
function(outpost_library target)
  cmake_parse_arguments(arg "REGISTER" "COMPONENT" "SOURCES;HEADERS;PUBLIC;PRIVATE" ${ARGN})
  if(NOT arg_COMPONENT OR NOT arg_SOURCES)
    message(FATAL_ERROR "outpost_library(${target}): COMPONENT and SOURCES are required")
  endif()
  add_library(${target} STATIC ${arg_SOURCES})
  add_library(outpost::${arg_COMPONENT} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${arg_COMPONENT}
                                             POSITION_INDEPENDENT_CODE ON)
  if(arg_HEADERS)
    list(TRANSFORM arg_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/include/)
    target_sources(${target} PUBLIC FILE_SET HEADERS BASE_DIRS ${PROJECT_SOURCE_DIR}/include
                   FILES ${arg_HEADERS})
  endif()
  target_link_libraries(${target} PUBLIC ${arg_PUBLIC}
                        PRIVATE ${arg_PRIVATE} $<BUILD_INTERFACE:outpost_internal>)
  if(arg_REGISTER)
    target_sources(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/register_${arg_COMPONENT}.cpp)
    target_link_libraries(${target} PUBLIC outpost_factory)
    target_link_options(${target} INTERFACE "LINKER:--undefined=outpost_register_${arg_COMPONENT}")
    set_property(GLOBAL APPEND PROPERTY OUTPOST_REGISTERED_COMPONENTS ${arg_COMPONENT})
  endif()
  set_property(GLOBAL APPEND PROPERTY OUTPOST_COMPONENTS ${arg_COMPONENT})
  set_property(GLOBAL APPEND PROPERTY OUTPOST_COMPONENT_TARGETS ${target})
  if(OUTPOST_INSTALL)
    install(TARGETS ${target} EXPORT outpost-${arg_COMPONENT}-targets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
            FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
    install(EXPORT outpost-${arg_COMPONENT}-targets NAMESPACE outpost::
            DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/outpost COMPONENT dev)
  endif()
endfunction()

# outpost_backend(<target> COMPONENT <c> SOURCES ... [HEADERS ...] [PRIVATE ...]): a store or
# sink, registered with the factory, linking its C client (cmake/OutpostClients.cmake) PRIVATE.
# When the client was not found it says so and defines nothing: configuring never fails for a
# missing optional client, and the CLI, tests and benchmarks check `TARGET outpost_<...>`.
function(outpost_backend target)
  cmake_parse_arguments(arg "" "COMPONENT" "" ${ARGN})
  outpost_find_client(${arg_COMPONENT} found client)
  if(NOT found)
    message(STATUS "outpost: ${client} not found, the ${arg_COMPONENT} backend is not built")
    return()
  endif()
  outpost_library(${target} COMPONENT ${arg_COMPONENT} REGISTER ${arg_UNPARSED_ARGUMENTS}
                  PRIVATE ${client})
endfunction()
