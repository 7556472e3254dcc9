# The one version of npuflow lives in the VERSION file at the top of the repository; the
# top-level project() reads it, and this makes it a header (npuflow/version.h) for the CLI, the
# EP's GetVersion and the ggml device description. The wheel and the board tarball read the same
# file. npuflow_public_headers carries include/ and the generated header to every target.
set(NPUFLOW_GENERATED_INCLUDE_DIR ${CMAKE_BINARY_DIR}/include)
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.h.in
               ${NPUFLOW_GENERATED_INCLUDE_DIR}/npuflow/version.h @ONLY)

add_library(npuflow_public_headers INTERFACE)
target_include_directories(npuflow_public_headers INTERFACE
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
  $<BUILD_INTERFACE:${NPUFLOW_GENERATED_INCLUDE_DIR}>)
