# `cmake --install BUILD --prefix PREFIX` (and `./run install PREFIX`): what a user puts on their
# PATH and links against.
#   PREFIX/bin/lockstep                          the command
#   PREFIX/lib/liblockstep.so*                   the C API (lockstep_c)
#   PREFIX/include/lockstep/lockstep.h           its header
#   PREFIX/<LOCKSTEP_INSTALL_PYTHONDIR>/lockstep the Python package, compiled module included
# The C++ static library is not installed: it is built for the project's own targets, and
# a C++ program embeds it from a build tree (README.md, "The library").
include(GNUInstallDirs)

# Not under CMAKE_INSTALL_LIBDIR, which is multiarch (lib/x86_64-linux-gnu) for the prefix /usr.
set(LOCKSTEP_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
    "where `cmake --install` puts the Python package, relative to the prefix")

install(TARGETS lockstep_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS lockstep_c LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/lockstep/lockstep.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep)
if(LOCKSTEP_BUILD_PYTHON)
  file(GLOB LOCKSTEP_PY_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/lockstep/*.py)
  install(FILES ${LOCKSTEP_PY_FILES} DESTINATION ${LOCKSTEP_INSTALL_PYTHONDIR}/lockstep)
  install(TARGETS _lockstep LIBRARY DESTINATION ${LOCKSTEP_INSTALL_PYTHONDIR}/lockstep)
endif()

if(LOCKSTEP_BUILD_TESTS)
  # Installs into a folder of the build tree and runs what it installed (tests/install/).
  add_test(NAME install_into_a_prefix
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR}
                   -DPREFIX=${CMAKE_BINARY_DIR}/install-test
                   -DPYTHONDIR=${LOCKSTEP_INSTALL_PYTHONDIR}
                   -DWITH_PYTHON=${LOCKSTEP_BUILD_PYTHON}
                   -DPYTHON=${LOCKSTEP_TEST_PYTHON}
                   -P ${PROJECT_SOURCE_DIR}/tests/install/check_install.cmake)
  set_tests_properties(install_into_a_prefix PROPERTIES TIMEOUT 300)
endif()
