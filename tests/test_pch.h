// The precompiled header of the test executables: the standard, gtest/gmock and absl headers most tests include.
// It only speeds up the build (parsing these once per build instead of once per test file); every test still
// includes what it uses. Only third-party and standard headers belong here, so no test sees an mcx header it
// did not include (docs/testing.md, "Build time").
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
