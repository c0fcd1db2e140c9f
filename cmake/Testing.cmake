# fa_add_gpu_tests(name exe [LABELS label...]): registers the GPU test groups of one test
# program built from tests/test_steps.cpp (a step's, or an exercise's) or from
# tests/test_backward.cpp (a backward step's; they share the groups), one ctest entry per
# group, so a failure says which kind of case broke. Labels: "gpu;<name>" unless given (the
# exercises use "exercise;exercise_NN", the backward steps "gpu;<name>;backward"). The
# programs exit with 77 without a usable CUDA device, which ctest reports as skipped, never
# as passed.
function(fa_add_gpu_tests name exe)
  cmake_parse_arguments(arg "" "" "LABELS" ${ARGN})
  if(NOT arg_LABELS)
    set(arg_LABELS gpu ${name})
  endif()
  foreach(group shapes causal gqa layout distributions edges numerics determinism)
    add_test(NAME ${name}/${group} COMMAND ${exe} "[${group}]")
    set_tests_properties(${name}/${group} PROPERTIES
      LABELS "${arg_LABELS}" SKIP_RETURN_CODE 77 TIMEOUT 900)
  endforeach()
endfunction()


# fa_add_decode_tests(name exe [NO_OFFSETS] [LABELS label...]): registers the groups of one
# test program built from tests/test_decode_gpu.cpp (a decoding step's, or its exercise's), one
# ctest entry per group. Labels: "gpu;<name>;decode" unless given (the exercise uses
# "exercise;exercise_NN"). Without a usable CUDA device the program exits with 77: skipped.
# NO_OFFSETS leaves out [offsets] (caches past element 2^32: about 26 GB of device memory,
# skipped where it is not free), so that an exercise is graded on any GPU.
function(fa_add_decode_tests name exe)
  cmake_parse_arguments(arg "NO_OFFSETS" "" "LABELS" ${ARGN})
  if(NOT arg_LABELS)
    set(arg_LABELS gpu ${name} decode)
  endif()
  set(groups append shapes gqa causal splits offsets refusals)
  if(arg_NO_OFFSETS)
    list(REMOVE_ITEM groups offsets)
  endif()
  foreach(group ${groups})
    add_test(NAME ${name}/${group} COMMAND ${exe} "[${group}]")
    set_tests_properties(${name}/${group} PROPERTIES
      LABELS "${arg_LABELS}" SKIP_RETURN_CODE 77 TIMEOUT 900)
  endforeach()
endfunction()
