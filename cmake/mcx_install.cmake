# Install rules and a CMake package config so that users can `find_package(mcx CONFIG REQUIRED)` and link
# `mcx::mcx`. Headers are installed with the layout of the source tree (include <mcx/...>).
include(CMakePackageConfigHelpers)

get_property(mcx_layers GLOBAL PROPERTY MCX_LAYERS)
install(TARGETS ${mcx_layers} mcx EXPORT mcxTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/mcx/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mcx
        FILES_MATCHING PATTERN "*.h")
if(MCX_BUILD_DISTRIBUTED)
  install(DIRECTORY ${CMAKE_BINARY_DIR}/mcx/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mcx
          FILES_MATCHING PATTERN "*.pb.h")
endif()
install(EXPORT mcxTargets NAMESPACE mcx:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mcx)

configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/mcxConfig.cmake.in
  ${CMAKE_BINARY_DIR}/mcxConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mcx)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/mcxConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/mcxConfig.cmake ${CMAKE_BINARY_DIR}/mcxConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mcx)
