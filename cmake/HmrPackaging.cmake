# Debian packages with CPack (scripts/package.sh builds them): one package per install
# component (cmake/HmrInstall.cmake, tools/, plugins/).
#   libhmr0          runtime: libhmr.so.0 (soname libhmr.so.0, symbols in HMR_0.1)
#   libhmr-dev       dev:     headers, libhmr.so, libhmr.a, the CMake package, hmr.pc
#   hmr-tools        tools:   hmr-info, hmr-perftest
#   libnccl-net-hmr  nccl:    libnccl-net-hmr.so, where NCCL's dlopen finds it by name
#   python3-hmr      python:  the Python package hmr in /usr/lib/python3/dist-packages (when
#                             python/ is built: Python 3.11+ development files found)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hmr)
set(CPACK_PACKAGE_VENDOR "the hmr developers")
set(CPACK_PACKAGE_CONTACT "hmr developers <hmr@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools nccl)
if(TARGET hmr_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)  # (debug information stays in the build tree)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://localhost/hmr")
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# Dependencies on system libraries from the binaries themselves (dpkg-shlibdeps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The tools and the plugin need libhmr.so.0, which is in the build tree, not the system; the
# packages' own Depends say libhmr0 (= version) for it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)

set(hmr_deb_version "${PROJECT_VERSION}-1")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libhmr0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "heterogeneous memory registration for RDMA NICs
hmr registers host and device memory (CUDA, ROCr, Level Zero, Neuron,
SynapseAI) with RDMA NICs through libfabric, rdma-core or an application's
own functions, with a registration cache that never goes stale.
This package holds the shared library.")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libhmr-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libhmr0 (= ${hmr_deb_version})")
set(CPACK_COMPONENT_DEV_DESCRIPTION "heterogeneous memory registration for RDMA NICs (development)
The C and C++ headers of hmr, the static library, the CMake package
(find_package(hmr)) and the pkg-config file (hmr.pc).")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME hmr-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libhmr0 (= ${hmr_deb_version})")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "heterogeneous memory registration for RDMA NICs (tools)
hmr-info reports what this machine offers for registering memory with RDMA
NICs, and why anything is missing; hmr-perftest measures registration and
RMA, perftest style.")
set(CPACK_DEBIAN_NCCL_PACKAGE_NAME libnccl-net-hmr)
set(CPACK_DEBIAN_NCCL_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_NCCL_PACKAGE_DEPENDS "libhmr0 (= ${hmr_deb_version})")
set(CPACK_COMPONENT_NCCL_DESCRIPTION "NCCL net plugin over hmr and libfabric
An NCCL net plugin (ncclNetPlugin v8-v11) that moves data over libfabric
providers and registers memory through hmr. NCCL loads it with
NCCL_NET_PLUGIN=hmr.")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-hmr)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
# One stable-ABI module serves every Python 3 from 3.11 on (docs/python.md).
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "libhmr0 (= ${hmr_deb_version}), python3 (>= 3.11)")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "heterogeneous memory registration for RDMA NICs (Python)
The Python package hmr: registers NumPy arrays, PyTorch tensors and any
buffer-protocol, DLPack or CUDA-array-interface object with RDMA NICs
through hmr, with its registration cache.")
# libhmr0 runs ldconfig after install and removal (a shared library in a system directory).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/libhmr0/shlibs;${PROJECT_SOURCE_DIR}/packaging/libhmr0/triggers")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_NCCL_PACKAGE_CONTROL_EXTRA "${PROJECT_SOURCE_DIR}/packaging/libnccl-net-hmr/triggers")
set(CPACK_DEBIAN_NCCL_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# Every package carries the Debian copyright file and changelog.
foreach(component ${CPACK_COMPONENTS_ALL})
  string(TOUPPER ${component} upper)
  set(package ${CPACK_DEBIAN_${upper}_PACKAGE_NAME})
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/copyright
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package} COMPONENT ${component}
          EXCLUDE_FROM_ALL)
  # changelog.Debian.gz, compressed at build time (lintian wants it gzipped, with -n).
  set(changelog ${PROJECT_BINARY_DIR}/packaging/${package}/changelog.Debian.gz)
  add_custom_command(OUTPUT ${changelog}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/packaging/${package}
    COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/packaging/changelog > ${changelog}
    DEPENDS ${PROJECT_SOURCE_DIR}/packaging/changelog)
  add_custom_target(hmr_changelog_${component} ALL DEPENDS ${changelog})
  install(FILES ${changelog} DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
          COMPONENT ${component} EXCLUDE_FROM_ALL)
endforeach()

include(CPack)
