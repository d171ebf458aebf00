# How other projects consume k8slease; included from the top-level
# CMakeLists.txt once the library targets exist.
#
#   add_subdirectory(k8slease)  ->  k8slease::k8slease, k8slease::k8s_lease_wrapper (ALIAS)
#   find_package(k8slease)      ->  the same names, IMPORTED from the export set
#   pkg-config k8slease         ->  -lk8slease (--static: with its dependencies)
#   pkg-config k8s_lease_wrapper -> -lk8s_lease_wrapper (the seed ABI)
#
# Only the shared libraries are exported: the static library's dependencies
# are pkg-config IMPORTED targets (PkgConfig::CURL, ...) that belong to this
# build, so static linking goes through `pkg-config --static --libs k8slease`.
include(CMakePackageConfigHelpers)

add_library(k8slease::k8slease ALIAS k8slease)
if(TARGET k8s_lease_wrapper)
  add_library(k8slease::k8s_lease_wrapper ALIAS k8s_lease_wrapper)
endif()
set_target_properties(k8slease PROPERTIES EXPORT_NAME k8slease)

set(K8SLEASE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/k8slease)

# libk8slease.so.0.1.0, the SONAME link libk8slease.so.0 and the development
# link libk8slease.so (debian/ splits them between the runtime and -dev).
install(TARGETS k8slease EXPORT k8sleaseTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS k8slease_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/k8slease.h include/k8slease.hpp include/libk8s_lease_wrapper.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET k8s_lease_wrapper)
  set_target_properties(k8s_lease_wrapper PROPERTIES EXPORT_NAME k8s_lease_wrapper)
  install(TARGETS k8s_lease_wrapper EXPORT k8sleaseTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

install(EXPORT k8sleaseTargets NAMESPACE k8slease:: DESTINATION ${K8SLEASE_CMAKE_DIR})
configure_package_config_file(cmake/k8sleaseConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/k8sleaseConfig.cmake
  INSTALL_DESTINATION ${K8SLEASE_CMAKE_DIR})
# 0.x: a minor version may break the API; SameMinorVersion until 1.0.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/k8sleaseConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/k8sleaseConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/k8sleaseConfigVersion.cmake DESTINATION ${K8SLEASE_CMAKE_DIR})

# pkg-config files. They name the prefix the files are installed under, which
# `cmake --install --prefix P` may choose after configuring: the install step
# writes them (the .pc.in are configured twice: now for the version and the
# directories, at install time for the prefix).
set(K8SLEASE_PC_PREFIX "@K8SLEASE_INSTALL_PREFIX@")
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(K8SLEASE_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(K8SLEASE_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(K8SLEASE_PC_DEST "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
else()
  set(K8SLEASE_PC_DEST "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()
set(K8SLEASE_PC_FILES k8slease)
if(TARGET k8s_lease_wrapper)
  list(APPEND K8SLEASE_PC_FILES k8s_lease_wrapper)
endif()
foreach(pc IN LISTS K8SLEASE_PC_FILES)
  configure_file(cmake/${pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${pc}.pc.in @ONLY)
  install(CODE "
    set(K8SLEASE_INSTALL_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
    configure_file(\"${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${pc}.pc.in\"
      \"${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${pc}.pc\" @ONLY)
    file(INSTALL DESTINATION \"${K8SLEASE_PC_DEST}\" TYPE FILE
      FILES \"${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${pc}.pc\")")
endforeach()
