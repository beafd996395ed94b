# Chooses CMAKE_CUDA_ARCHITECTURES before project(). See the top-level CMakeLists.txt.
# Sets FA_ARCHS_DEFAULTED (the course chose the list, so a lesson may pick its own arch) and
# FA_GPU_COMPUTE_CAP (the GPU found at configure time, or empty).
function(fa_choose_cuda_architectures)
  if(DEFINED CACHE{FA_DEFAULT_ARCHS} AND "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "${FA_DEFAULT_ARCHS}")
    set(FA_ARCHS_DEFAULTED ON CACHE INTERNAL "")
    return()  # our own choice from an earlier configure
  endif()
  if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
    set(FA_ARCHS_DEFAULTED OFF CACHE INTERNAL "")
    set(FA_GPU_COMPUTE_CAP "" CACHE INTERNAL "")
    return()  # the user's choice wins
  endif()
  find_program(FA_NVIDIA_SMI nvidia-smi)
  set(cap "")
  if(FA_NVIDIA_SMI)
    execute_process(COMMAND ${FA_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE cap RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      set(cap "")
    endif()
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" cap "${cap}")
  endif()
  if(cap)
    set(archs native)
    message(STATUS "GPU with compute capability ${cap} found: building for it (native)")
  else()
    # No GPU here: sm_80 code (which sm_86 and sm_89 run too) with compute_80 PTX (which every
    # later GPU can compile), and sm_90 code. The list's first entry is what a build compiled for
    # one architecture gets (the GPU patch mutants and the tile-counting builds, cmake/FaLesson.cmake):
    # it only runs on a GPU, never here, so compute_80 PTX alone is enough; the device compiler
    # still checks that it compiles, ptxas is skipped (a third of its time), and a GPU machine
    # builds it for itself.
    # Every other target gets from "80-virtual;80-real" exactly what "80" gives.
    set(archs "80-virtual;80-real;90-real")
    message(STATUS "No GPU found: building sm_80 (+ PTX for later GPUs) and sm_90")
  endif()
  set(FA_GPU_COMPUTE_CAP "${cap}" CACHE INTERNAL "")
  set(FA_DEFAULT_ARCHS "${archs}" CACHE INTERNAL "")
  set(FA_ARCHS_DEFAULTED ON CACHE INTERNAL "")
  set(CMAKE_CUDA_ARCHITECTURES "${archs}" CACHE STRING "CUDA architectures")
endfunction()
