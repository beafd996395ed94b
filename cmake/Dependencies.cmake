# Every dependency, found once, with the Debian/Ubuntu package to install when it is missing.
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "No CUDA compiler (nvcc) found. Install the CUDA Toolkit (NVIDIA's cuda-toolkit "
                      "package, or `sudo apt-get install nvidia-cuda-toolkit`) and put nvcc on PATH, "
                      "or pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc.")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

find_package(Eigen3 3.3 NO_MODULE QUIET)
if(NOT TARGET Eigen3::Eigen)
  message(FATAL_ERROR "Eigen3 not found: install it with `sudo apt-get install libeigen3-dev`")
endif()
find_package(doctest QUIET)
if(NOT TARGET doctest::doctest)
  message(FATAL_ERROR "doctest not found: install it with `sudo apt-get install doctest-dev`")
endif()
include(doctest)  # doctest_discover_tests
