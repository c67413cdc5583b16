# `cmake --install BUILD_DIR --prefix PREFIX` puts a working `lockstep` in PREFIX/bin, the C
# library and header beside it and (WITH_PYTHON) an importable Python package. Run by ctest
# (cmake/install.cmake) after the build; PREFIX is emptied first.
foreach(var BUILD_DIR PREFIX PYTHONDIR WITH_PYTHON PYTHON)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_install.cmake needs -D${var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${status}):\n${out}\n${err}")
endif()

foreach(path bin/lockstep include/lockstep/lockstep.h)
  if(NOT EXISTS "${PREFIX}/${path}")
    message(FATAL_ERROR "not installed: ${PREFIX}/${path}")
  endif()
endforeach()
file(GLOB c_library "${PREFIX}/lib*/liblockstep.so")
if(NOT c_library)
  message(FATAL_ERROR "not installed: ${PREFIX}/lib/liblockstep.so")
endif()

# The installed command runs on its own, from another directory.
execute_process(COMMAND "${PREFIX}/bin/lockstep" --help WORKING_DIRECTORY "${PREFIX}"
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0 OR NOT out MATCHES "train")
  message(FATAL_ERROR "${PREFIX}/bin/lockstep --help: status ${status}\n${out}\n${err}")
endif()
execute_process(COMMAND "${PREFIX}/bin/lockstep" --version RESULT_VARIABLE status OUTPUT_VARIABLE out)
if(NOT status EQUAL 0 OR NOT out MATCHES "^lockstep ")
  message(FATAL_ERROR "${PREFIX}/bin/lockstep --version: status ${status}\n${out}")
endif()

if(WITH_PYTHON)
  # The package and its compiled module from the prefix alone (not the source or build tree).
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env "PYTHONPATH=${PREFIX}/${PYTHONDIR}"
            "${PYTHON}" -c "import lockstep, os; assert lockstep.__file__.startswith(os.environ['PYTHONPATH']), lockstep.__file__; print(lockstep.LanguageModelInference.__name__)"
    WORKING_DIRECTORY "${PREFIX}" RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0 OR NOT out MATCHES "LanguageModelInference")
    message(FATAL_ERROR "the installed Python package does not import: status ${status}\n${out}\n${err}")
  endif()
endif()
file(REMOVE_RECURSE "${PREFIX}")
message(STATUS "installed into ${PREFIX} and ran bin/lockstep --help")
