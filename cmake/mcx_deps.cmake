# Third-party dependencies, all from Debian packages (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)  # compilation cache entries (mcx/cache)
if(MCX_BUILD_DISTRIBUTED)
  find_package(Protobuf REQUIRED)
  find_package(gRPC CONFIG REQUIRED)
  # The data plane between processes (Debian's libgloo-dev: tcp transport). Its package config defines the
  # imported target `gloo`.
  find_package(Gloo CONFIG REQUIRED)
  # Optional: the MPI data plane (MCX_COLLECTIVES=mpi) when Debian's OpenMPI development files are installed.
  find_package(MPI COMPONENTS C)
endif()
if(MCX_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
