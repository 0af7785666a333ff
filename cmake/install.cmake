# Installation rules: the shared and static library, the public header, a
# pkg-config file and a CMake package (eccl::eccl, eccl::eccl_static), plus the
# command-line tools when they are part of the build.
#
# Included at the end of the top-level CMakeLists.txt, so every target that
# can be installed exists by now.

include(CMakePackageConfigHelpers)

set(ECCL_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/eccl)

install(TARGETS eccl eccl_static
  EXPORT ecclTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/eccl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Programs (tools/, examples/, eccl-sim) install themselves; their run path
# is set in the top-level CMakeLists.txt (CMAKE_INSTALL_RPATH) before they are
# defined.

# ---- CMake package ----------------------------------------------------------
install(EXPORT ecclTargets
  NAMESPACE eccl::
  FILE ecclTargets.cmake
  DESTINATION ${ECCL_CMAKE_INSTALL_DIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/ecclConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ecclConfig.cmake
  INSTALL_DESTINATION ${ECCL_CMAKE_INSTALL_DIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/ecclConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ecclConfig.cmake ${PROJECT_BINARY_DIR}/ecclConfigVersion.cmake
  DESTINATION ${ECCL_CMAKE_INSTALL_DIR})

# ---- pkg-config -------------------------------------------------------------
# The prefix is written at *install* time, not configure time, so that
# `cmake --install build --prefix DIR` (and CMAKE_INSTALL_PREFIX overrides)
# yield a .pc file that points at DIR. Two steps: at configure time
# everything but the prefix is filled in, leaving the literal
# @CMAKE_INSTALL_PREFIX@ behind (configure_file does not re-expand substituted
# values); an install(CODE) step then substitutes the install-time prefix.
set(ECCL_PC_PREFIX "@CMAKE_INSTALL_PREFIX@")
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(ECCL_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(ECCL_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
# Needed only when linking libeccl.a (pkg-config --static).
set(ECCL_PC_LIBS_PRIVATE "-lpthread -lm -lssl -lcrypto")
if(FIU_LIBRARY)
  string(APPEND ECCL_PC_LIBS_PRIVATE " -lfiu")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/eccl.pc.in ${PROJECT_BINARY_DIR}/eccl.pc.configured @ONLY)
install(CODE "configure_file(\"${PROJECT_BINARY_DIR}/eccl.pc.configured\" \"${PROJECT_BINARY_DIR}/eccl.pc\" @ONLY)")
install(FILES ${PROJECT_BINARY_DIR}/eccl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
