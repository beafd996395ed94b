# ctest: fails when the lesson library LIB refers to the reference (fa::ref::), which a student's
# kernel must not call. Run as: cmake -DNM=<nm> -DLIB=<liblessonNN.a> -P check_no_reference.cmake
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND ${NM} -C --undefined-only ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not read the symbols of ${LIB}: ${err}")
endif()
string(REGEX MATCHALL "[^\n]*fa::ref::[^\n]*" hits "${out}")
if(hits)
  message(FATAL_ERROR "${LIB} calls the reference, which lesson code must not do:\n${hits}")
endif()
message(STATUS "${LIB} does not refer to fa::ref")
