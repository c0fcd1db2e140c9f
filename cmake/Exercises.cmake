# Exercises.cmake — the exercise machinery, included from steps/CMakeLists.txt.
#
# steps/NN_slug/exercise/ holds copies of the step's key files, under the same
# names, with the lesson blanked: `TODO(exercise)` markers and a compiling placeholder that
# fails the tests. The rest of each file is the solution, so `diff -u` shows only the lesson
# (scripts/exercise.sh diff NN). HINTS.md beside them; docs/instructors.md for teachers.
#
# fa_add_exercise(NN_slug) builds, for the exercise of step NN_slug:
#   exercise_NN          the step's own tests, linked with the exercise's files in place of
#                        the solution's files of the same names. GPU steps: the GPU suite
#                        (fa_gpu_tests_obj) over the step compiled from exercise/ plus the
#                        step's other sources (copied to the build tree when the exercise
#                        overrides a header, see below); a backward step (one added by
#                        fa_add_backward_step, listed in FA_BACKWARD_STEPS, so call this
#                        after it) gets the backward suite (fa_gpu_backward_tests_obj,
#                        tests/test_backward.cpp), as its test_NN_slug does; a decoding
#                        step (fa_add_decode_step, FA_DECODE_STEPS) its own GPU tests
#                        (tests/test_decode_gpu.cpp, fa_add_decode_tests). Step 00: the CPU
#                        tests of the reference and the streaming model (test_reference.cpp)
#                        over exercise/*.cpp plus the rest of reference/.
#   exercise_NN/<group>  its ctest entries, labels "exercise;exercise_NN" (ctest -L
#                        exercise_NN). scripts/test.sh leaves the label "exercise" out: the
#                        skeletons fail until solved.
# The exercise targets are not part of the default build, so that a half-done exercise never
# breaks it: `cmake --build build --target exercises` builds them all.
add_custom_target(exercises)

function(fa_add_exercise name)
  string(SUBSTRING "${name}" 0 2 nn)
  set(exe exercise_${nn})
  set(ex_dir ${PROJECT_SOURCE_DIR}/steps/${name}/exercise)
  if(nn STREQUAL "00")  # the CPU exercise: the files of reference/
    set(sol_dir ${PROJECT_SOURCE_DIR}/reference)
    set(src_ext cpp)
  else()
    set(sol_dir ${PROJECT_SOURCE_DIR}/steps/${name})
    set(src_ext cu)
  endif()

  # Every exercise file stands in for the solution file of the same name.
  file(GLOB ex_files CONFIGURE_DEPENDS
       ${ex_dir}/*.cu ${ex_dir}/*.cuh ${ex_dir}/*.cpp ${ex_dir}/*.h)
  set(overrides_header FALSE)
  foreach(f IN LISTS ex_files)
    get_filename_component(base ${f} NAME)
    if(NOT EXISTS ${sol_dir}/${base})
      message(FATAL_ERROR "${f}: an exercise file must have the name of a solution file in "
                          "${sol_dir}")
    endif()
    if(NOT base MATCHES "\\.${src_ext}$")
      set(overrides_header TRUE)
    endif()
  endforeach()
  file(GLOB sol_srcs CONFIGURE_DEPENDS ${sol_dir}/*.${src_ext})
  set(srcs "")
  foreach(f IN LISTS sol_srcs)
    get_filename_component(base ${f} NAME)
    if(EXISTS ${ex_dir}/${base})
      list(APPEND srcs ${ex_dir}/${base})
    elseif(overrides_header)
      # #include "x.cuh" looks next to the including file first: compiled where it lies, a
      # solution source would find the solution's header, not the exercise's. A copy in the
      # build tree has no header beside it, so its includes follow the include path below:
      # the exercise's folder first. (Step 07's flash_fwd_d*_*.cu include the exercise's
      # flash_fwd_kernel.cuh this way.) The copy is refreshed whenever the source changes.
      set(copy ${CMAKE_CURRENT_BINARY_DIR}/${exe}_src/${base})
      configure_file(${f} ${copy} COPYONLY)
      list(APPEND srcs ${copy})
    else()
      list(APPEND srcs ${f})
    endif()
  endforeach()

  if(nn STREQUAL "00")
    # reference/'s headers are included by their path from the root ("reference/attention.h"):
    # exercise 00 replaces sources only.
    if(overrides_header)
      message(FATAL_ERROR "${ex_dir}: exercise 00 may replace reference/*.cpp files only")
    endif()
    add_library(${exe}_lib STATIC EXCLUDE_FROM_ALL ${srcs})
    target_link_libraries(${exe}_lib PUBLIC fa_common Eigen3::Eigen)
    target_compile_options(${exe}_lib PRIVATE ${FA_CXX_WARNINGS})
    add_executable(${exe} EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/tests/test_reference.cpp)
    target_link_libraries(${exe} PRIVATE fa_test_main ${exe}_lib)
    target_compile_options(${exe} PRIVATE ${FA_CXX_WARNINGS})
    foreach(group reference streaming)
      add_test(NAME ${exe}/${group} COMMAND ${exe} "[${group}]")
      set_tests_properties(${exe}/${group} PROPERTIES LABELS "exercise;${exe}")
    endforeach()
  else()
    add_library(${exe}_step OBJECT EXCLUDE_FROM_ALL ${srcs})
    # The overlay: a step's own headers are included by name ("mask.cuh"), found next to the
    # exercise's file when the exercise has its own, otherwise here: the exercise's folder
    # first, then the step's (for the headers the exercise leaves alone).
    target_include_directories(${exe}_step BEFORE PRIVATE ${ex_dir} ${sol_dir})
    target_link_libraries(${exe}_step PUBLIC fa_cuda)
    # The suite the step's own test program runs: the backward one for a backward step, the
    # decoding one (tests/test_decode_gpu.cpp, its own groups) for a decoding step.
    get_property(backward_steps GLOBAL PROPERTY FA_BACKWARD_STEPS)
    get_property(decode_steps GLOBAL PROPERTY FA_DECODE_STEPS)
    if(name IN_LIST decode_steps)
      add_executable(${exe} EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/tests/test_decode_gpu.cpp)
      target_link_libraries(${exe} PRIVATE fa_gpu_test_main fa_reference ${exe}_step)
      target_compile_options(${exe} PRIVATE ${FA_CXX_WARNINGS})
      fa_add_decode_tests(${exe} ${exe} NO_OFFSETS LABELS exercise ${exe})
    else()
      if(name IN_LIST backward_steps)
        set(suite fa_gpu_backward_tests_obj)
      else()
        set(suite fa_gpu_tests_obj)
      endif()
      add_executable(${exe} EXCLUDE_FROM_ALL)
      target_link_libraries(${exe} PRIVATE ${suite} ${exe}_step)
      fa_add_gpu_tests(${exe} ${exe} LABELS exercise ${exe})
    endif()
  endif()
  add_dependencies(exercises ${exe})
endfunction()
