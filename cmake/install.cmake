# `cmake --install`: the two modules, the CLI, the public headers and a CMake package
# (lib/cmake/npuflow/npuflowConfig.cmake) whose imported targets are
#   npuflow::ep       the ONNX Runtime plugin EP (load it with RegisterExecutionProviderLibrary;
#                     never link it: $<TARGET_FILE:npuflow::ep> is its path)
#   npuflow::ggml     the ggml backend module (GGML_BACKEND_PATH / ggml_backend_load), if built
#   npuflow::cli      the npuflow command
#   npuflow::headers  include/npuflow: npuflow.h (EP and device names), version.h, ggml-npuflow.h
# The wheel (python/build_wheel.py) and the board tarball (tools/dist_aarch64.sh) are made from
# this install tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(NPUFLOW_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/npuflow)

target_include_directories(npuflow_public_headers INTERFACE
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(npuflow_public_headers PROPERTIES EXPORT_NAME headers)
# The modules find libraries bundled beside them (the board tarball's oneDNN) before the system's.
set_target_properties(onnxruntime_npuflow PROPERTIES EXPORT_NAME ep INSTALL_RPATH "$ORIGIN")
# The installed CLI finds a libonnxruntime.so.1 installed beside the modules (the board tarball
# ships one) before the system's.
set_target_properties(npuflow PROPERTIES EXPORT_NAME cli
                      INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set(npuflow_install_targets npuflow_public_headers onnxruntime_npuflow npuflow)
if(TARGET ggml-npuflow)
  set_target_properties(ggml-npuflow PROPERTIES EXPORT_NAME ggml INSTALL_RPATH "$ORIGIN")
  list(APPEND npuflow_install_targets ggml-npuflow)
endif()

install(TARGETS ${npuflow_install_targets} EXPORT npuflowTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/npuflow/npuflow.h
              ${NPUFLOW_GENERATED_INCLUDE_DIR}/npuflow/version.h
              ${CMAKE_SOURCE_DIR}/src/ggml/ggml-npuflow.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/npuflow)
install(EXPORT npuflowTargets NAMESPACE npuflow:: DESTINATION ${NPUFLOW_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/npuflowConfig.cmake.in
  ${CMAKE_BINARY_DIR}/npuflowConfig.cmake INSTALL_DESTINATION ${NPUFLOW_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the knobs and the report, so only the same minor matches.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/npuflowConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/npuflowConfig.cmake ${CMAKE_BINARY_DIR}/npuflowConfigVersion.cmake
        DESTINATION ${NPUFLOW_INSTALL_CMAKEDIR})

# The rocket device module is GPL-3.0 (src/rocket/LICENSE.md): it is installed only on request,
# `cmake --install <build> --component rocket`, beside the EP library where the core looks for it.
# The wheel and the default install stay MIT.
if(TARGET npuflow-device-rocket)
  install(TARGETS npuflow-device-rocket LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT rocket EXCLUDE_FROM_ALL)
  install(FILES ${CMAKE_SOURCE_DIR}/src/rocket/LICENSE.md DESTINATION
          ${CMAKE_INSTALL_DATADIR}/npuflow/rocket COMPONENT rocket EXCLUDE_FROM_ALL)
endif()
