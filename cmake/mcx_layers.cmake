# mcx_add_layer(NAME DIR DEPS...): one static library per layer folder, sources globbed so that
# adding a file to a layer needs no CMake edit. A layer links only the layers below it (docs/architecture.md, "Layers and folders").
function(mcx_add_layer name dir)
  cmake_parse_arguments(L "" "" "DEPS;EXCLUDE" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.cc)
  foreach(ex IN LISTS L_EXCLUDE)
    list(FILTER srcs EXCLUDE REGEX "${ex}")
  endforeach()
  if(NOT srcs)  # a layer whose sources are not written yet still configures
    set(empty ${CMAKE_BINARY_DIR}/empty_${name}.cc)
    file(WRITE ${empty} "// layer ${name} has no sources yet\n")
    set(srcs ${empty})
  endif()
  add_library(${name} STATIC ${srcs})
  add_library(mcx::${name} ALIAS ${name})
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}> $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${name} PUBLIC ${L_DEPS})
  # Each layer precompiles the standard and absl headers its sources share (cmake/pch/library.h).
  target_precompile_headers(${name} PRIVATE ${CMAKE_SOURCE_DIR}/cmake/pch/library.h)
  set_property(GLOBAL APPEND PROPERTY MCX_LAYERS ${name})
endfunction()

# mcx_add_test(NAME LABEL SOURCES... LIBS ... [ENVIRONMENT VAR=value...]): one gtest executable, tests discovered and
# labelled; each ENVIRONMENT argument is one variable. The variables reach the tests as one, MCX_TEST_ENVIRONMENT
# (tests/support/environment/test_environment.cc sets them before main): gtest_discover_tests keeps only the
# first entry of a list-valued ENVIRONMENT property.
function(mcx_add_test name label)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;ENVIRONMENT" ${ARGN})
  add_executable(${name} ${T_SOURCES} ${CMAKE_SOURCE_DIR}/tests/support/environment/test_environment.cc)
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  # One precompiled header (tests/test_pch.h) for every test executable: the first one built through here owns
  # it, the others reuse it (their compile options are the same; a test's own -D macros do not appear in it).
  get_property(pch_owner GLOBAL PROPERTY MCX_TEST_PCH_OWNER)
  if(pch_owner)
    target_precompile_headers(${name} REUSE_FROM ${pch_owner})
  else()
    target_precompile_headers(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/test_pch.h)
    target_link_libraries(${name} PRIVATE absl::status absl::statusor absl::strings absl::time)
    set_property(GLOBAL PROPERTY MCX_TEST_PCH_OWNER ${name})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(T_ENVIRONMENT)
    list(JOIN T_ENVIRONMENT " " env)
    gtest_discover_tests(${name} PROPERTIES LABELS ${label} TIMEOUT ${T_TIMEOUT}
                         ENVIRONMENT "MCX_TEST_ENVIRONMENT=${env}" DISCOVERY_TIMEOUT 60)
  else()
    gtest_discover_tests(${name} PROPERTIES LABELS ${label} TIMEOUT ${T_TIMEOUT} DISCOVERY_TIMEOUT 60)
  endif()
endfunction()

# Runs the tests of `name` (made by mcx_add_test) a second time on the test-only platform (MCX_PLATFORMS=test,
# tests/support/test_platform.h) with `devices` virtual devices, as "test_platform/<test>", leaving out the
# tests in MCX_CPU_ONLY_TESTS (a list of gtest filter patterns: tests about the CPU platform itself).
function(mcx_add_test_platform_run name devices)
  set(filter "*")
  if(MCX_CPU_ONLY_TESTS)
    list(JOIN MCX_CPU_ONLY_TESTS ":" excluded)
    set(filter "*-${excluded}")
  endif()
  gtest_discover_tests(${name} TEST_PREFIX "test_platform/" TEST_FILTER "${filter}"
                       PROPERTIES LABELS unit TIMEOUT 120
                                  ENVIRONMENT "MCX_TEST_ENVIRONMENT=MCX_CPU_DEVICE_COUNT=${devices} MCX_PLATFORMS=test"
                       DISCOVERY_TIMEOUT 60)
endfunction()
