# fuzz.cmake: the fuzz targets, one per parser: every tests/fuzz/fuzz_NAME.c
# (it defines LLVMFuzzerTestOneInput) with its corpus in tests/fuzz/corpus/NAME/.
#
# Every build: each target is linked with tests/fuzz/driver.c (a replay and
# seeded-mutation main) and a ctest, fuzz_corpus_NAME, replays the committed
# corpus and a fixed number of seeded mutations of it, so no committed input
# may ever crash (under ASan + UBSan in the sanitizer build).
#
# -DSPINDLE_FUZZ=ON (with CC=clang, in its own build folder; scripts/fuzz.sh):
# the libraries (every one links spindle_base, which carries the flags) and the targets are built with ASan + UBSan and coverage
# instrumentation, and each target is linked with libFuzzer when clang has it
# (else with the driver). `cmake --build DIR --target fuzz` builds them all.
option(SPINDLE_FUZZ "Build the fuzz targets with libFuzzer, ASan and UBSan (needs clang)" OFF)

set(FUZZ_DIR ${CMAKE_SOURCE_DIR}/tests/fuzz)
file(GLOB fuzz_sources CONFIGURE_DEPENDS ${FUZZ_DIR}/fuzz_*.c)
list(SORT fuzz_sources)
set(FUZZ_USE_LIBFUZZER OFF)

if(SPINDLE_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SPINDLE_FUZZ needs clang (configure with CC=clang in its own build folder)")
  endif()
  if(SPINDLE_SANITIZE)
    message(FATAL_ERROR "SPINDLE_FUZZ already builds with ASan + UBSan; leave SPINDLE_SANITIZE off")
  endif()
  set(FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,undefined")
  check_c_source_compiles("#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }" SPINDLE_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(SPINDLE_HAVE_LIBFUZZER)
    set(FUZZ_USE_LIBFUZZER ON)
    target_compile_options(spindle_base PUBLIC ${FUZZ_SAN} -fsanitize=fuzzer-no-link)
  else()
    message(STATUS "clang has no libFuzzer runtime: the fuzz targets use tests/fuzz/driver.c")
    target_compile_options(spindle_base PUBLIC ${FUZZ_SAN})
  endif()
  target_link_options(spindle_base INTERFACE -fsanitize=address,undefined)
  add_custom_target(fuzz)
endif()

foreach(src ${fuzz_sources})
  get_filename_component(target ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" name ${target})
  add_executable(${target} ${src})
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  target_include_directories(${target} PRIVATE ${FUZZ_DIR})
  # The parsers under test live in model/, data/ and checkpoints/.
  target_link_libraries(${target} PRIVATE spindle_checkpoints)
  if(FUZZ_USE_LIBFUZZER)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  else()
    target_sources(${target} PRIVATE ${FUZZ_DIR}/driver.c)
  endif()
  if(SPINDLE_FUZZ)
    add_dependencies(fuzz ${target})
  endif()
  if(IS_DIRECTORY ${FUZZ_DIR}/corpus/${name})
    if(FUZZ_USE_LIBFUZZER)
      # libFuzzer given files (not folders) runs each once and exits.
      file(GLOB corpus_files ${FUZZ_DIR}/corpus/${name}/*)
      add_test(NAME fuzz_corpus_${name} COMMAND ${target} ${corpus_files})
    else()
      add_test(NAME fuzz_corpus_${name} COMMAND ${target} -runs=2000 -seed=1 -check_names=1 ${FUZZ_DIR}/corpus/${name})
    endif()
  endif()
endforeach()
