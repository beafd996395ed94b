# The one CMake helper per lesson, and the one helper per test executable.
#
#   fa_add_lesson(<NN> <name> TITLE <title> SUPPORTS <feature...> HEAD_DIMS <d...>|ANY [ALIGN <bytes>]
#                 POINTS <correctness> <performance>
#                 [FORWARD_SUITE] [BACKWARD_SUITE] [MODEL] [ARCH <arch>] [TILE_COUNTS forward|backward...]
#                 [CPU_TESTS files...] [GPU_TESTS files...])
#
# is the lesson's one declaration. TITLE, SUPPORTS (fp16 bf16 causal seqlen_q_ne_k gqa any_strides
# varlen rope gate index64), HEAD_DIMS (ANY: 1 to 256) and ALIGN (the alignment of base pointers and
# row strides the kernel needs, default 2) become fa_lesson_<NN>_declared(), generated into
# ${CMAKE_BINARY_DIR}/generated/lesson<NN>_declared.cpp and compiled into the lesson: its descriptor
# (fa_lesson_<NN>(), at the end of its kernel file) starts from it and adds the entry points and
# variants, and its tests require what it declares (tests/lesson_binding.cpp), so no file restates it
# and a lesson cannot dodge a case by declaring less. POINTS are its grading points
# (${CMAKE_BINARY_DIR}/grading.txt, fa_write_grading below). It
# builds ${FA_LESSONS_DIR}/<NN>_<name>/*.{cu,cpp} into the library lesson<NN> (linked with the
# runtime, never with the reference), and its tests labelled lesson<NN>:
#   FORWARD_SUITE  the shared forward suite (tests/forward_suite.cpp) run on this lesson
#   BACKWARD_SUITE the shared backward suite (tests/backward_suite.cpp) run on this lesson
#   MODEL          the lesson also has a CPU model of its kernel (fa_lesson_<NN>_model, host
#                  memory): the same suites run on it, without a GPU
#   CPU_TESTS      lesson-specific tests that need no GPU (CPU models, layout functions)
#   GPU_TESTS      lesson-specific tests that need a GPU
#   TILE_COUNTS    the lesson skips work: a test build counts the tiles each work tile visits in
#                  that direction (forward, backward or both), and tests/tile_counts_test.cpp checks
#                  them (label lessonNN.tiles); with varlen, also on a packed batch, heaviest first
#   ARCH           a CUDA architecture the lesson needs (e.g. 90a): the lesson is built for it
#                  alone, when the course chose the architectures (unless the GPU present is
#                  another) or the user's list has it; otherwise it is skipped, with a message
#                  here and a skipped test.
# Whether the forward suite needs a GPU follows from the lesson: a lesson with .cu sources is a
# GPU lesson, lesson 00 (host C++) is not.

set(FA_SKIP_CODE 77)  # a GPU test executable returns this on a machine without a GPU

# fa_gpu_only_build(<arch> <targets...>): targets that only run on the GPU at hand (the GPU patch
# mutants, the tile-counting builds) are compiled for one architecture, <arch> (native: the
# project's own). With FA_COMPILE_ONLY_GPU_BUILDS (no GPU here, CMakeLists.txt) they are compiled
# only to check that they compile: <arch>'s PTX alone (no ptxas), device code unoptimized.
function(fa_gpu_only_build arch)
  if(FA_COMPILE_ONLY_GPU_BUILDS)
    string(REGEX REPLACE "-(real|virtual)$" "" arch "${arch}")
    if(arch STREQUAL "native")
      message(FATAL_ERROR "FA_COMPILE_ONLY_GPU_BUILDS needs a CUDA architecture, not native")
    endif()
    set_target_properties(${ARGN} PROPERTIES CUDA_ARCHITECTURES ${arch}-virtual)
    foreach(t IN LISTS ARGN)
      target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcicc=-O0>)
    endforeach()
  elseif(NOT arch STREQUAL "native")
    set_target_properties(${ARGN} PROPERTIES CUDA_ARCHITECTURES ${arch})
  endif()
endfunction()

# The test cases a test source declares: its lines TEST_CASE("<name>") ..., in order, into <out>.
# The source becomes a configure dependency: a test case added or renamed there regenerates the
# manifest at the next build.
function(fa_test_cases file out)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  file(STRINGS ${file} lines REGEX "^TEST_CASE\\(\"")
  set(cases "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^TEST_CASE\\(\"([^\"]*)\".*$" "\\1" name "${line}")
    list(APPEND cases "${name}")
  endforeach()
  set(${out} "${cases}" PARENT_SCOPE)
endfunction()

# fa_add_doctest(<target> KIND cpu|gpu LABEL <label> [PART <part>] SOURCES ... [LIBS ...] [DEFINES ...]
#                [CASES_REGEX <regex>])
# One doctest executable with the course's main (skip code, FA_REQUIRE_GPU, FA_TEST_SEED);
# every test case becomes a ctest test named <label>/<case> (<label>/<part>/<case> with PART)
# with labels <label> and <kind>. The cases its sources declare (and the shared suites it links) are
# the manifest's lines for <label> (<label>.<part>): fa_add_manifest_checks. CASES_REGEX keeps only
# the declared cases it matches (a source whose cases are chosen by a define: tile_counts_test.cpp).
function(fa_add_doctest target)
  cmake_parse_arguments(T "" "KIND;LABEL;PART;CASES_REGEX" "SOURCES;LIBS;DEFINES" ${ARGN})
  set(prefix "${T_LABEL}/")
  set(key "${T_LABEL}")
  if(T_PART)
    set(prefix "${T_LABEL}/${T_PART}/")
    set(key "${T_LABEL}.${T_PART}")
  endif()
  set(entries "")
  foreach(src IN LISTS T_SOURCES)
    get_filename_component(abs ${src} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    fa_test_cases(${abs} cases)
    foreach(c IN LISTS cases)
      if(NOT T_CASES_REGEX OR c MATCHES "${T_CASES_REGEX}")
        list(APPEND entries "${c}")
      endif()
    endforeach()
  endforeach()
  foreach(suite forward backward)
    if(fa_${suite}_suite IN_LIST T_LIBS)
      list(APPEND entries "@${suite}-suite")
    endif()
  endforeach()
  set_property(GLOBAL APPEND PROPERTY FA_MANIFEST_CASES_${key} "${entries}")
  add_executable(${target} ${T_SOURCES})
  target_link_libraries(${target} PRIVATE fa_test_main_${T_KIND} doctest::doctest fa_runtime ${T_LIBS})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${target} PRIVATE ${T_DEFINES})
  doctest_discover_tests(${target} TEST_PREFIX "${prefix}" TEST_LIST ${target}_TESTS
                         PROPERTIES SKIP_RETURN_CODE ${FA_SKIP_CODE} TIMEOUT 600)
  # doctest_discover_tests resets LABELS, so set ours in a file ctest reads after its list.
  set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake")
  file(WRITE "${labels_file}"
       "if(${target}_TESTS)\n  set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"${T_LABEL};${T_KIND}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
  set_property(GLOBAL APPEND PROPERTY FA_MANIFEST_EXES_${key} "$<TARGET_FILE:${target}>")
  set_property(GLOBAL APPEND PROPERTY FA_MANIFEST_LABELS ${key})
endfunction()

# The definitions that bind tests/lesson_binding.cpp (or a mutant) to a lesson: its descriptor
# getter, its declaration (the requirements) and its number, without leading zeros ("08" would be
# an octal literal in C++).
function(fa_lesson_binding_defines out getter nn)
  string(REGEX REPLACE "^0+([0-9])" "\\1" number "${nn}")
  set(${out} FA_LESSON_GETTER=${getter} FA_LESSON_DECLARED=fa_lesson_${nn}_declared FA_LESSON_NUMBER=${number} PARENT_SCOPE)
endfunction()

# The generated file of lesson <NN>'s declaration (fa_declare_lesson writes it; the lesson, its
# test-count build and its mutants compile it), into <out>.
function(fa_declared_file nn out)
  set(${out} ${CMAKE_BINARY_DIR}/generated/lesson${nn}_declared.cpp PARENT_SCOPE)
endfunction()

# fa_declare_lesson(<NN> <id> <kind cpu|gpu> <arch> TITLE ... SUPPORTS ... HEAD_DIMS ... ALIGN ... POINTS ...):
# writes generated/lesson<NN>_declared.cpp (fa_lesson_<NN>_declared(): id, title, memory, features,
# the GPU it needs) and records the points for fa_write_grading. Its path in <out>.
function(fa_declare_lesson nn id kind arch out)
  cmake_parse_arguments(D "" "TITLE;ALIGN" "SUPPORTS;HEAD_DIMS;POINTS" ${ARGN})
  set(where "fa_add_lesson(${nn}): ")
  if(NOT D_TITLE)
    message(FATAL_ERROR "${where}TITLE <the lesson's one-line title> is required")
  endif()
  if(NOT D_HEAD_DIMS)
    message(FATAL_ERROR "${where}HEAD_DIMS <d...> or HEAD_DIMS ANY is required")
  endif()
  list(LENGTH D_POINTS n_points)
  if(NOT n_points EQUAL 2)
    message(FATAL_ERROR "${where}POINTS <correctness> <performance> is required (two numbers)")
  endif()
  set(known fp16 bf16 causal seqlen_q_ne_k gqa any_strides varlen rope gate index64)
  set(features "")
  foreach(f IN LISTS D_SUPPORTS)
    if(NOT f IN_LIST known)
      message(FATAL_ERROR "${where}SUPPORTS ${f}: not a feature (${known})")
    endif()
    string(APPEND features "  l.features.${f} = true;\n")
  endforeach()
  if(D_HEAD_DIMS STREQUAL "ANY")
    set(dims "  l.features.head_dims = {};  // any head dim up to 256\n")
  else()
    foreach(d IN LISTS D_HEAD_DIMS)
      if(NOT d MATCHES "^[1-9][0-9]*$")
        message(FATAL_ERROR "${where}HEAD_DIMS takes head dims or ANY, not ${d}")
      endif()
    endforeach()
    string(REPLACE ";" ", " list "${D_HEAD_DIMS}")
    set(dims "  l.features.head_dims = {${list}};\n")
  endif()
  set(align "")
  if(D_ALIGN)
    set(align "  l.features.alignment_bytes = ${D_ALIGN};\n")
  endif()
  set(memory kDevice)
  if(kind STREQUAL "cpu")
    set(memory kHost)
  endif()
  set(sm "")
  if(arch MATCHES "^([0-9]+)a?$")
    set(sm "  l.needs_sm = ${CMAKE_MATCH_1};  // built for sm_${arch} alone\n")
  endif()
  string(REPLACE "\\" "\\\\" title "${D_TITLE}")
  string(REPLACE "\"" "\\\"" title "${title}")
  fa_declared_file(${nn} file)
  string(CONCAT content
    "// Generated by fa_add_lesson (cmake/FaLesson.cmake) from lesson ${nn}'s line in CMakeLists.txt: do not edit.\n"
    "// What the lesson supports, declared once: its descriptor starts from it, its tests require it.\n"
    "#include \"fa/params.hpp\"\n\n"
    "fa::LessonInfo fa_lesson_${nn}_declared() {\n"
    "  fa::LessonInfo l;\n"
    "  l.id = \"${id}\";\n"
    "  l.title = \"${title}\";\n"
    "  l.memory = fa::Memory::${memory};\n"
    "${features}${dims}${align}${sm}"
    "  return l;\n"
    "}\n")
  file(CONFIGURE OUTPUT ${file} CONTENT "${content}")
  list(GET D_POINTS 0 p0)
  list(GET D_POINTS 1 p1)
  set_property(GLOBAL APPEND PROPERTY FA_GRADING_POINTS "lesson${nn} ${p0} ${p1}")
  set(${out} ${file} PARENT_SCOPE)
endfunction()

# ${CMAKE_BINARY_DIR}/grading.txt, what fa-grade reads: tests/grading.txt's rules and features, then
# each lesson's points from its fa_add_lesson line (POINTS).
function(fa_write_grading)
  file(READ ${PROJECT_SOURCE_DIR}/tests/grading.txt rules)
  get_property(points GLOBAL PROPERTY FA_GRADING_POINTS)
  string(REPLACE ";" "\n" points "${points}")
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/grading.txt
       CONTENT "${rules}\n# Lesson lines, from the POINTS of each fa_add_lesson line (CMakeLists.txt): <label> <points> <perf points>.\n${points}\n")
endfunction()

function(fa_add_lesson nn name)
  cmake_parse_arguments(L "FORWARD_SUITE;BACKWARD_SUITE;MODEL" "ARCH;TITLE;ALIGN" "CPU_TESTS;GPU_TESTS;SUPPORTS;HEAD_DIMS;POINTS;TILE_COUNTS" ${ARGN})
  set(id ${nn}_${name})
  set(label lesson${nn})
  set(dir ${FA_LESSONS_DIR}/${id})
  # The declaration first: a lesson skipped below (missing, or for another GPU) keeps its points.
  file(GLOB cu_srcs CONFIGURE_DEPENDS ${dir}/*.cu)
  set(kind gpu)
  if(EXISTS ${dir} AND NOT cu_srcs)
    set(kind cpu)  # host C++ only (lesson 00)
  endif()
  fa_declare_lesson(${nn} ${id} ${kind} "${L_ARCH}" declared TITLE "${L_TITLE}" SUPPORTS ${L_SUPPORTS} HEAD_DIMS ${L_HEAD_DIMS}
                    ALIGN "${L_ALIGN}" POINTS ${L_POINTS})
  if(NOT EXISTS ${dir})
    message(WARNING "lesson ${id}: ${dir} does not exist; its test reports it missing")
    add_test(NAME ${label}/missing COMMAND ${CMAKE_COMMAND} -E false)
    set_tests_properties(${label}/missing PROPERTIES LABELS "${label};cpu")
    return()
  endif()

  set(arch_override "")
  if(L_ARCH)
    set(have OFF)
    string(REGEX REPLACE "^([0-9]+)([0-9])a?$" "\\1.\\2" need_cap "${L_ARCH}")  # 90a -> 9.0
    if(FA_ARCHS_DEFAULTED AND FA_GPU_COMPUTE_CAP AND NOT FA_GPU_COMPUTE_CAP STREQUAL need_cap)
      set(have OFF)  # building for the GPU present, and it is not the one this lesson needs
    elseif(FA_ARCHS_DEFAULTED)
      set(have ON)  # the course chose the list: build this lesson for the arch it needs
    elseif("${L_ARCH}" IN_LIST CMAKE_CUDA_ARCHITECTURES OR "${L_ARCH}-real" IN_LIST CMAKE_CUDA_ARCHITECTURES)
      set(have ON)
    endif()
    if(NOT have)
      set(why "lesson ${id} skipped: it needs CUDA architecture ${L_ARCH}, not in CMAKE_CUDA_ARCHITECTURES (${CMAKE_CUDA_ARCHITECTURES})")
      if(FA_GPU_COMPUTE_CAP)
        set(why "${why} on this GPU (compute capability ${FA_GPU_COMPUTE_CAP})")
      endif()
      message(STATUS "${why}")
      add_test(NAME ${label}/skipped_architecture COMMAND sh -c "echo '${why}'; exit ${FA_SKIP_CODE}")
      set_tests_properties(${label}/skipped_architecture PROPERTIES LABELS "${label};gpu" SKIP_RETURN_CODE ${FA_SKIP_CODE})
      set_property(GLOBAL PROPERTY FA_LESSON_SKIPPED_${nn} TRUE)  # its patch mutants are left out too
      return()
    endif()
    # This lesson alone, for the one architecture it needs (its instructions exist nowhere else);
    # its patch mutants follow it.
    set(arch_override ${L_ARCH})
    set_property(GLOBAL PROPERTY FA_LESSON_ARCH_${nn} ${L_ARCH})
  endif()

  file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cu ${dir}/*.cpp)
  if(NOT srcs)
    message(FATAL_ERROR "lesson ${id}: no .cu or .cpp sources in ${dir}")
  endif()
  list(APPEND srcs ${declared})  # fa_lesson_<NN>_declared(), generated above
  add_library(${label} STATIC ${srcs})
  set_property(GLOBAL APPEND PROPERTY FA_BUILT_LESSONS ${nn})  # fa-bench runs every lesson built
  # The runtime and Eigen (lesson 00's exercise is Eigen code); never fa_reference.
  target_link_libraries(${label} PUBLIC fa_runtime PRIVATE Eigen3::Eigen)
  target_include_directories(${label} PUBLIC ${dir})  # a lesson's own headers, for its tests
  # An earlier lesson's headers, by folder: lesson 14 (and its tests) include "13_hopper/wgmma.hpp".
  target_include_directories(${label} PUBLIC ${FA_LESSONS_DIR})
  # ptxas -v reports every kernel's registers and spills: kept in <object>.ptxas.log beside each
  # object (CI checks them for spills), only spills and warnings printed (cmake/quiet-ptxas.sh).
  target_compile_options(${label} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  set_target_properties(${label} PROPERTIES CUDA_COMPILER_LAUNCHER "sh;${PROJECT_SOURCE_DIR}/cmake/quiet-ptxas.sh")
  set(targets ${label})

  # Up to four test executables: the shared suites on the lesson (GPU or not, like the lesson)
  # and on its CPU model, and the lesson's own CPU and GPU tests.
  set(binding ${PROJECT_SOURCE_DIR}/tests/lesson_binding.cpp)
  set(src_forward "")
  set(src_model "")
  set(suites "")
  if(L_FORWARD_SUITE)
    list(APPEND suites fa_forward_suite)
  endif()
  if(L_BACKWARD_SUITE)
    list(APPEND suites fa_backward_suite)
  endif()
  if(suites)
    set(src_forward ${binding})
  endif()
  if(L_MODEL)
    set(src_model ${binding})
  endif()
  set(libs_forward ${suites})
  set(libs_model ${suites})
  set(libs_cpu "")
  set(libs_gpu "")
  set(src_cpu ${L_CPU_TESTS} ${binding})
  set(src_gpu ${L_GPU_TESTS} ${binding})
  if(NOT L_CPU_TESTS)
    set(src_cpu "")
  endif()
  if(NOT L_GPU_TESTS)
    set(src_gpu "")
  endif()
  set(kind_forward ${kind})
  set(kind_model cpu)
  set(kind_cpu cpu)
  set(kind_gpu gpu)
  # The lesson's own CPU tests first (small, worked examples), then its CPU model, then the suites
  # on the lesson itself: ctest runs them in this order (tools/check-lesson.sh).
  foreach(part cpu model forward gpu)
    set(getter fa_lesson_${nn})
    set(part_arg "")
    if(part STREQUAL "model")
      set(getter fa_lesson_${nn}_model)
      set(part_arg PART model)
    endif()
    if(src_${part})
      fa_lesson_binding_defines(binding_defines ${getter} ${nn})
      fa_add_doctest(test_${label}_${part} KIND ${kind_${part}} LABEL ${label} ${part_arg} SOURCES ${src_${part}}
                     LIBS ${label} fa_reference fa_test_support ${libs_${part}}
                     DEFINES ${binding_defines})
      list(APPEND targets test_${label}_${part})
    endif()
  endforeach()
  # TILE_COUNTS forward|backward...: a test build of the lesson counts the tiles each work tile
  # visits (FA_COUNT_TILES, fa/device.cuh), and tests/tile_counts_test.cpp checks them. It is
  # compiled for one architecture (it only runs on the GPU at hand, like the mutants).
  if(L_TILE_COUNTS)
    set(direction_defines "")
    foreach(d IN LISTS L_TILE_COUNTS)
      if(NOT d MATCHES "^(forward|backward)$")
        message(FATAL_ERROR "lesson ${id}: TILE_COUNTS takes forward, backward or both, not ${d}")
      endif()
      string(TOUPPER ${d} direction)
      list(APPEND direction_defines FA_TILES_${direction}=1)
    endforeach()
    list(JOIN L_TILE_COUNTS "|" directions)
    # A lesson of packed batches also has their cases (its maps' tiles, heaviest first).
    set(cases_regex "^tiles: the (${directions}) ")
    set(packed_define "")
    if("varlen" IN_LIST L_SUPPORTS)
      set(cases_regex "^tiles: (a packed batch: )?the (${directions}) ")
      set(packed_define FA_TILES_PACKED=1)
      set_property(GLOBAL PROPERTY FA_LESSON_PACKED_TILES_${nn} TRUE)  # and its tile-count mutants
    endif()
    add_library(${label}_counted STATIC ${srcs})
    target_link_libraries(${label}_counted PUBLIC fa_runtime PRIVATE Eigen3::Eigen)
    target_include_directories(${label}_counted PUBLIC ${dir} PRIVATE ${FA_LESSONS_DIR})
    target_compile_definitions(${label}_counted PRIVATE FA_COUNT_TILES)
    fa_lesson_binding_defines(binding_defines fa_lesson_${nn} ${nn})
    fa_add_doctest(test_${label}_tiles KIND gpu LABEL ${label} PART tiles CASES_REGEX "${cases_regex}"
                   SOURCES ${PROJECT_SOURCE_DIR}/tests/tile_counts_test.cpp ${binding}
                   LIBS ${label}_counted fa_reference fa_test_support DEFINES ${binding_defines} ${direction_defines}
                   ${packed_define})
    list(GET CMAKE_CUDA_ARCHITECTURES 0 one_arch)
    if(arch_override)
      set(one_arch ${arch_override})
    endif()
    fa_gpu_only_build(${one_arch} ${label}_counted test_${label}_tiles)
    list(APPEND targets test_${label}_tiles)
  endif()
  if(arch_override)
    set_target_properties(${targets} PROPERTIES CUDA_ARCHITECTURES ${arch_override})
  endif()

  # One target a student builds and runs a lesson with: cmake --build --preset student --target check-lessonNN
  # (the lesson alone: another lesson's compile error does not stop it), and one that only builds it
  # (tools/progress.sh).
  add_custom_target(build-${label} DEPENDS ${targets})
  add_custom_target(check-${label} COMMAND sh ${PROJECT_SOURCE_DIR}/tools/check-lesson.sh ${CMAKE_BINARY_DIR} ${label}
                    DEPENDS ${targets} USES_TERMINAL COMMENT "Testing lesson ${id}")

  # The student's library must not call the answer: no undefined fa::ref:: symbol in it.
  add_test(NAME ${label}/links_without_reference
           COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DLIB=$<TARGET_FILE:${label}>
                   -P ${PROJECT_SOURCE_DIR}/cmake/check_no_reference.cmake)
  set_tests_properties(${label}/links_without_reference PROPERTIES LABELS "${label};cpu")
endfunction()

# The manifest, <build>/manifest.txt: per label (<label>.<part>), the test cases its executables'
# sources declare, the shared suites as groups (a line "<label> | @forward-suite" stands for every
# "@forward-suite | <case>" line). One test per label checks that its executables register exactly
# those cases: a test executable that fails to build or to list cannot make its tests vanish
# quietly. fa-grade scores 0 a lesson whose manifest test fails.
function(fa_add_manifest_checks)
  get_property(labels GLOBAL PROPERTY FA_MANIFEST_LABELS)
  list(REMOVE_DUPLICATES labels)
  set(manifest ${CMAKE_BINARY_DIR}/manifest.txt)
  string(CONCAT text "# Generated by fa_add_manifest_checks (cmake/FaLesson.cmake) from the test sources: do not edit.\n"
                     "# <label> | <test case>, or <label> | @group for every case listed under @group.\n")
  foreach(suite forward backward)
    fa_test_cases(${PROJECT_SOURCE_DIR}/tests/${suite}_suite.cpp cases)
    foreach(c IN LISTS cases)
      string(APPEND text "@${suite}-suite | ${c}\n")
    endforeach()
  endforeach()
  foreach(l IN LISTS labels)
    get_property(cases GLOBAL PROPERTY FA_MANIFEST_CASES_${l})
    foreach(c IN LISTS cases)
      string(APPEND text "${l} | ${c}\n")
    endforeach()
  endforeach()
  file(CONFIGURE OUTPUT ${manifest} CONTENT "${text}")
  foreach(l IN LISTS labels)
    get_property(exes GLOBAL PROPERTY FA_MANIFEST_EXES_${l})
    string(REPLACE ";" "|" exes "${exes}")
    add_test(NAME ${l}/manifest
             COMMAND ${CMAKE_COMMAND} -DLABEL=${l} "-DEXES=${exes}" -DMANIFEST=${manifest}
                     -P ${PROJECT_SOURCE_DIR}/cmake/check_manifest.cmake)
    string(REGEX REPLACE "\\..*" "" label "${l}")  # lesson04.model -> lesson04
    set_tests_properties(${l}/manifest PROPERTIES LABELS "${label};cpu")
  endforeach()
endfunction()

# fa_add_mutants(<name> KIND cpu|gpu LESSON <NN> GETTER <function> SOURCES <files...> MUTANTS <m...>)
# Builds the shared forward suite against a deliberately wrong implementation whose mutation is
# chosen at run time by FA_MUTANT, and adds one test per mutant that passes only when the suite
# rejects that mutant by a numerical failure (exit 1 with a MISMATCH report; a crash, a hang or
# "not implemented" proves nothing), plus a control run with FA_MUTANT=none that must pass.
# MUTANTS takes <mutant>=<hint>: the hint id (tests/hints.hpp) the rejection must give, or none.
function(fa_add_mutants name)
  cmake_parse_arguments(M "NO_CONTROL" "KIND;LESSON;GETTER;SUITE" "SOURCES;MUTANTS" ${ARGN})
  if(NOT M_SUITE)
    set(M_SUITE forward)
  endif()
  set(target mutants_${name})
  # The lesson's declaration (its requirements): generated by its fa_add_lesson line, which writes
  # it at configure time, before the build needs it.
  fa_declared_file(${M_LESSON} declared)
  add_executable(${target} ${PROJECT_SOURCE_DIR}/tests/lesson_binding.cpp ${M_SOURCES} ${declared})
  set(kind cpu)
  if(M_KIND STREQUAL "gpu")
    set(kind gpu)
  endif()
  target_link_libraries(${target} PRIVATE fa_${M_SUITE}_suite fa_test_main_${kind} doctest::doctest fa_runtime
                        fa_reference fa_test_support)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  fa_lesson_binding_defines(binding_defines ${M_GETTER} ${M_LESSON})
  target_compile_definitions(${target} PRIVATE ${binding_defines})
  set(runs none=- ${M_MUTANTS})
  if(M_NO_CONTROL)
    set(runs ${M_MUTANTS})  # the control is the real lesson's own suite
  endif()
  foreach(run IN LISTS runs)
    if(NOT run MATCHES "^([a-z0-9_]+)=([a-z0-9-]+)$")
      message(FATAL_ERROR "mutant '${run}': write <mutant>=<hint id or none> (tests/hints.hpp)")
    endif()
    set(m ${CMAKE_MATCH_1})
    set(hint ${CMAKE_MATCH_2})
    if(hint STREQUAL "-")
      set(hint "")
    else()
      set_property(GLOBAL APPEND PROPERTY FA_MUTANT_HINTS "${m}=${hint}")
    endif()
    set(test_name mutants/${name}/${m})
    if(m STREQUAL name)
      set(test_name mutants/${name})
    endif()
    add_test(NAME ${test_name} COMMAND sh ${PROJECT_SOURCE_DIR}/maintainers/run_mutant.sh $<TARGET_FILE:${target}> ${m} ${hint})
    set_tests_properties(${test_name} PROPERTIES LABELS "mutants;${M_KIND}" SKIP_RETURN_CODE ${FA_SKIP_CODE}
                         TIMEOUT 600)
  endforeach()
endfunction()

# fa_add_patch_mutants(): one test per maintainers/mutants/*.mutant (header lines: lesson:, file:, hint:,
# and optionally tests: and suite:). fa-mutate applies the mutant's
# edits to its solution file, which is compiled alone (it holds the entry point; a mutated header is
# compiled through a copy of the lesson's folder and its kernel.cu); the shared forward
# suite (and the test file a "tests:" line names) is built against the result (the lesson's CPU model for a model.cpp mutant,
# and lesson 00, run in CI; the GPU lesson otherwise) and must reject it by a numerical failure (maintainers/run_mutant.sh).
# GPU mutants are compiled for one architecture: they only need to run on the GPU at hand (a
# lesson's own ARCH if it has one).
function(fa_add_patch_mutants)
  file(GLOB specs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/maintainers/mutants/*.mutant)
  list(GET CMAKE_CUDA_ARCHITECTURES 0 one_arch)
  foreach(spec IN LISTS specs)
    get_filename_component(name ${spec} NAME_WE)
    file(STRINGS ${spec} head LIMIT_COUNT 5 REGEX "^(lesson|file|tests|suite|hint): ")
    string(REGEX MATCH "lesson: ([0-9][0-9])_[a-z0-9_]+" _ "${head}")
    set(nn ${CMAKE_MATCH_1})
    string(REGEX MATCH "lesson: ([0-9a-z_]+)" _ "${head}")
    set(lesson ${CMAKE_MATCH_1})
    string(REGEX MATCH "file: ([A-Za-z0-9_.]+)" _ "${head}")
    set(file ${CMAKE_MATCH_1})
    if(NOT nn OR NOT file)
      message(FATAL_ERROR "${spec}: the first two lines must be 'lesson: NN_name' and 'file: <file>'")
    endif()
    get_property(skipped GLOBAL PROPERTY FA_LESSON_SKIPPED_${nn})
    if(skipped)
      continue()  # the lesson itself is not built here (fa_add_lesson said why)
    endif()
    get_property(arch GLOBAL PROPERTY FA_LESSON_ARCH_${nn})
    if(NOT arch)
      set(arch ${one_arch})
    endif()
    set(out ${CMAKE_BINARY_DIR}/mutants/${name}/${file})
    set(compiled ${out})
    if(file MATCHES "\\.(cu|cpp)$")
      add_custom_command(OUTPUT ${out}
                         COMMAND fa-mutate ${spec} ${PROJECT_SOURCE_DIR}/solutions ${out}
                         DEPENDS fa-mutate ${spec} ${PROJECT_SOURCE_DIR}/solutions/${lesson}/${file}
                         COMMENT "Mutant ${name}")
    else()
      # A header of the lesson (lesson 13's consumer.cuh, ...): the lesson's folder is copied beside
      # it, the header mutated there, and the copy's kernel.cu compiled, which includes the mutated
      # header (a quoted include looks in the including file's folder first).
      set(dir ${CMAKE_BINARY_DIR}/mutants/${name})
      set(compiled ${dir}/kernel.cu)
      file(GLOB lesson_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/solutions/${lesson}/*.cu ${PROJECT_SOURCE_DIR}/solutions/${lesson}/*.cuh
           ${PROJECT_SOURCE_DIR}/solutions/${lesson}/*.hpp)
      add_custom_command(OUTPUT ${out} ${compiled}
                         COMMAND ${CMAKE_COMMAND} -E copy_directory ${PROJECT_SOURCE_DIR}/solutions/${lesson} ${dir}
                         COMMAND fa-mutate ${spec} ${PROJECT_SOURCE_DIR}/solutions ${out}
                         DEPENDS fa-mutate ${spec} ${lesson_files}
                         COMMENT "Mutant ${name} (${file}, with the lesson's other files)")
    endif()
    set(getter fa_lesson_${nn})
    set(kind gpu)
    if(file STREQUAL "model.cpp")
      set(getter fa_lesson_${nn}_model)
      set(kind cpu)
    elseif(nn STREQUAL "00")
      set(kind cpu)  # lesson 00 is host C++ (Eigen)
    endif()
    # The mutated file alone: a kernel.cu holds its lesson's GPU entry point, a model.cpp its model.
    # "tests: <file>": the lesson's own tests run too (lesson 09's RoPE lives outside the forward suite).
    set(extra "")
    set(extra_tests "")
    string(REGEX MATCH "tests: ([A-Za-z0-9_.]+)" _ "${head}")
    if(CMAKE_MATCH_1)
      set(extra ${PROJECT_SOURCE_DIR}/tests/${CMAKE_MATCH_1})
      set(extra_tests ${CMAKE_MATCH_1})
    endif()
    # "suite: backward": the backward suite judges the mutant (lessons 10 on), not the forward one.
    set(suite forward)
    string(REGEX MATCH "suite: ([a-z]+)" _ "${head}")
    if(CMAKE_MATCH_1)
      set(suite ${CMAKE_MATCH_1})
    endif()
    # "hint: <id>|none": the hint its rejection must give (tests/hints.hpp), required.
    string(REGEX MATCH "hint: ([a-z0-9-]+)" _ "${head}")
    if(NOT CMAKE_MATCH_1)
      message(FATAL_ERROR "${spec}: a 'hint: <id>' line (tests/hints.hpp), or 'hint: none', is required")
    endif()
    set(hint ${CMAKE_MATCH_1})
    fa_add_mutants(${name} KIND ${kind} LESSON ${nn} GETTER ${getter} SUITE ${suite} SOURCES ${compiled} ${extra} MUTANTS ${name}=${hint} NO_CONTROL)
    target_include_directories(mutants_${name} PRIVATE ${PROJECT_SOURCE_DIR}/solutions/${lesson} ${PROJECT_SOURCE_DIR}/solutions)
    target_link_libraries(mutants_${name} PRIVATE Eigen3::Eigen)
    if(extra_tests STREQUAL "tile_counts_test.cpp")  # the test build that counts tiles, in the suite's direction
      string(TOUPPER ${suite} direction)
      target_compile_definitions(mutants_${name} PRIVATE FA_COUNT_TILES FA_TILES_${direction}=1)
      get_property(packed GLOBAL PROPERTY FA_LESSON_PACKED_TILES_${nn})
      if(packed)
        target_compile_definitions(mutants_${name} PRIVATE FA_TILES_PACKED=1)
      endif()
    endif()
    if(kind STREQUAL "gpu")
      fa_gpu_only_build(${arch} mutants_${name})
    elseif(NOT arch STREQUAL "native")
      set_target_properties(mutants_${name} PROPERTIES CUDA_ARCHITECTURES ${arch})
    endif()
  endforeach()
endfunction()
