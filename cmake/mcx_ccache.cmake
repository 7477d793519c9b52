# Compiler cache: when ccache is installed (scripts/install-deps.sh installs it) and MCX_CCACHE is ON, every C
# and C++ compile goes through it, so rebuilding an unchanged file in the same tree (a cleaned or reconfigured
# build directory, a switch between commits) is a cache hit instead of a compile. docs/testing.md ("Build time")
# says what it saves and what it does not. The settings:
#  - base_dir = the source tree and no hashing of the working directory, so paths are hashed relative to it;
#  - sloppiness pch_defines,time_macros, include_file_mtime/ctime: needed for hits through the layers'
#    precompiled headers (their .gch is rebuilt, with a new mtime, whenever the build directory is new).
# A clone at another path still misses: the precompiled headers it builds differ from the first tree's.
# MCX_CCACHE_DIR (default: ccache's own, ~/.cache/ccache) and MCX_CCACHE_MAXSIZE (20G: the release, ASan+UBSan
# and TSan objects of one tree) override where it lives and how large it grows.
option(MCX_CCACHE "Compile through ccache when it is installed" ON)
set(MCX_CCACHE_MAXSIZE "20G" CACHE STRING "Size limit of the compiler cache")
set(MCX_CCACHE_DIR "" CACHE PATH "Compiler cache directory (empty: ccache's default)")
if(MCX_CCACHE)
  find_program(MCX_CCACHE_PROGRAM ccache)
  if(MCX_CCACHE_PROGRAM)
    set(launcher ${CMAKE_COMMAND} -E env
        CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${MCX_CCACHE_MAXSIZE}
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime)
    if(MCX_CCACHE_DIR)
      list(APPEND launcher CCACHE_DIR=${MCX_CCACHE_DIR})
    endif()
    list(APPEND launcher ${MCX_CCACHE_PROGRAM})
    # ccache fails a compile when it cannot write its directory (a read-only home, a full disk): try one compile
    # through it now and compile directly when that fails, so the cache can never break a build.
    set(probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/mcx_ccache_probe)
    file(MAKE_DIRECTORY ${probe_dir})
    file(WRITE ${probe_dir}/probe.cc "int mcx_ccache_probe() { return 0; }\n")
    execute_process(COMMAND ${launcher} ${CMAKE_CXX_COMPILER} -c ${probe_dir}/probe.cc -o ${probe_dir}/probe.o
                    RESULT_VARIABLE probe_result OUTPUT_VARIABLE probe_output ERROR_VARIABLE probe_output)
    if(probe_result EQUAL 0)
      set(CMAKE_C_COMPILER_LAUNCHER ${launcher})
      set(CMAKE_CXX_COMPILER_LAUNCHER ${launcher})
      message(STATUS "mcx: compiling through ${MCX_CCACHE_PROGRAM} (MCX_CCACHE=OFF to compile directly)")
    else()
      message(STATUS "mcx: ccache does not work here, compiling directly: ${probe_output}")
    endif()
  endif()
endif()
