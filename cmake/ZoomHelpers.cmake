# Helpers that give every zoomd target the same flags, set per target (never
# globally): C++20, warnings, optional -Werror, sanitizers and -march.

function(zoom_target_flags target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(ZOOM_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(ZOOM_MARCH)
    target_compile_options(${target} PRIVATE -march=${ZOOM_MARCH})
  endif()
  if(ZOOM_SANITIZE)
    target_compile_options(${target} PUBLIC -fsanitize=address,undefined
                                            -fno-omit-frame-pointer)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
  if(ZOOM_FUZZ)
    # Coverage for libFuzzer, and the sanitizers its targets run under.
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined
                                             -fno-omit-frame-pointer)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()

# zoom_cc_library(NAME SRCS a.cc ... DEPS x y PRIVATE_DEPS z)
# A library without SRCS is header-only (INTERFACE).
function(zoom_cc_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  if(ARG_SRCS)
    add_library(${name} STATIC ${ARG_SRCS})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
    zoom_target_flags(${name})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
    target_compile_features(${name} INTERFACE cxx_std_20)
  endif()
endfunction()

# zoom_cc_binary(NAME SRCS a.cc ... DEPS x y)
function(zoom_cc_binary name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  zoom_target_flags(${name})
endfunction()

# zoom_cc_test(NAME SRCS a_test.cc ... DEPS x y [LABELS l])
# Each TEST() becomes its own ctest case; tests run from the build tree with
# ZOOM_TEST_DATA pointing at tests/data.
function(zoom_cc_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(ZOOM_SANITIZE)
    # ASan+UBSan run several times slower: a timeout is a hang detector,
    # not a speed target.
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 3")
  endif()
  zoom_cc_binary(${name} SRCS ${ARG_SRCS}
                 DEPS ${ARG_DEPS} zoom_testing GTest::gmock GTest::gtest_main)
  # The test files themselves (gmock-heavy, the code under test is in the
  # libraries, built as configured): -O1 and line tables only compile in
  # about half the time of -O2 -g (collection_test.cc: 45 s -> 22 s), which is
  # most of the CI run on two cores. Sanitizer reports keep file:line.
  target_compile_options(${name} PRIVATE $<$<CONFIG:RelWithDebInfo>:-O1 -g1>)
  # Collected for the zoom_tests target (tests/CMakeLists.txt).
  set_property(GLOBAL APPEND PROPERTY ZOOM_TEST_TARGETS ${name})
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
               ENVIRONMENT "ZOOM_TEST_DATA=${PROJECT_SOURCE_DIR}/tests/data")
endfunction()
