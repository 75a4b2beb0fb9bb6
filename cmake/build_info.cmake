# `sandboxd version`: the version, the git commit and the build type, in a header
# generated at every build (so a new commit shows without re-running CMake). A source
# tree without .git (a release tarball) or a machine without git says "unknown".
set(SANDBOXD_BUILD_INFO_DIR ${CMAKE_BINARY_DIR}/generated)
add_custom_target(sandboxd_build_info
  COMMAND ${CMAKE_COMMAND}
          -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
          -DOUTPUT=${SANDBOXD_BUILD_INFO_DIR}/sandboxd_build_info.h
          -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
          -P ${CMAKE_SOURCE_DIR}/cmake/write_build_info.cmake
  BYPRODUCTS ${SANDBOXD_BUILD_INFO_DIR}/sandboxd_build_info.h
  COMMENT "" VERBATIM)
target_include_directories(sandboxd PRIVATE ${SANDBOXD_BUILD_INFO_DIR})
add_dependencies(sandboxd sandboxd_build_info)
