# install: headers, libhmr.so/.a, hmrConfig.cmake (find_package(hmr) -> hmr::hmr) and hmr.pc.
include(CMakePackageConfigHelpers)

# Components are the Debian packages (cmake/HmrPackaging.cmake): runtime = libhmr0, dev =
# libhmr-dev, tools = hmr-tools, nccl = libnccl-net-hmr.
install(DIRECTORY include/hmr DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(TARGETS hmr EXPORT hmrTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(TARGETS hmr_static EXPORT hmrTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT hmrTargets NAMESPACE hmr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hmr
  COMPONENT dev)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hmrConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hmrConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hmr)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hmrConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hmrConfig.cmake ${PROJECT_BINARY_DIR}/hmrConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hmr COMPONENT dev)

# The .pc file finds its prefix relative to itself, so an installed tree can be moved.
file(RELATIVE_PATH HMR_PC_RELATIVE_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
configure_file(${PROJECT_SOURCE_DIR}/cmake/hmr.pc.in ${PROJECT_BINARY_DIR}/hmr.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/hmr.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)
