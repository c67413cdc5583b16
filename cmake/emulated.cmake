# lockstep_command(TARGET VAR): VAR is the path to run TARGET's program by, for tests that start
# it themselves (execv, `cmake -P` scripts) rather than as a CTest command. On a native build that
# is the program; on a cross build (cmake/aarch64-linux-gnu.cmake) it is a two-line script next to
# it that execs the program under CMAKE_CROSSCOMPILING_EMULATOR, so the process the test started,
# its exit status and its signals are the emulated program's.
function(lockstep_command target var)
  if(CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR)
    set(script "${CMAKE_BINARY_DIR}/emulated/${target}")
    list(JOIN CMAKE_CROSSCOMPILING_EMULATOR "\" \"" emulator)
    file(GENERATE OUTPUT "${script}"
         CONTENT "#!/bin/sh\nexec \"${emulator}\" \"$<TARGET_FILE:${target}>\" \"$@\"\n"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                          WORLD_READ WORLD_EXECUTE)
    set(${var} "${script}" PARENT_SCOPE)
  else()
    set(${var} "$<TARGET_FILE:${target}>" PARENT_SCOPE)
  endif()
endfunction()
