# cmake -DFIRST=<program> -DSECOND=<program> -DMODEL=<dir> -P same_output.cmake
# Both embedding programs succeed and print the same bytes for the same model and prompt.
foreach(which FIRST SECOND)
  execute_process(COMMAND "${${which}}" "${MODEL}" "Once upon a time" 48
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out_${which} ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${${which}} failed (${rc}): ${err}")
  endif()
endforeach()
if(NOT out_FIRST STREQUAL out_SECOND)
  message(FATAL_ERROR "the outputs differ:\n${out_FIRST}\n---\n${out_SECOND}")
endif()
message(STATUS "same output:\n${out_FIRST}")
