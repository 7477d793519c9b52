// What the tests look at to see the data plane's shared memory (data_plane/tcp/shared_memory_link.h): the segments
// a process maps (their names unlinked, so /proc/<pid>/maps shows them as deleted files) and the segment names
// left in /dev/shm (none should be, once a group is set up).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "mcx/distributed/data_plane/tcp/shared_memory_link.h"

namespace mcx::distributed::test {

// The data-plane segments the process maps; "self" for this process.
inline int mapped_data_plane_segments(const std::string& pid = "self") {
  std::ifstream maps("/proc/" + pid + "/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find(kSharedMemoryNamePrefix) != std::string::npos;
  return count;
}

// Data-plane segment names in /dev/shm.
inline int named_data_plane_segments() {
  const std::string prefix = std::string(kSharedMemoryNamePrefix).substr(1);  // without the leading '/'
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    count += e.path().filename().string().rfind(prefix, 0) == 0;
  }
  return count;
}

}  // namespace mcx::distributed::test
