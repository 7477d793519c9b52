// Compiled into every test executable (cmake/mcx_layers.cmake): before main, sets each NAME=value of
// MCX_TEST_ENVIRONMENT (space-separated). CTest's ENVIRONMENT property holds a list, but gtest_discover_tests
// passes its properties through a command line and a generated script that keep only the first entry, so a
// test that needs several variables gets this one variable instead.
#include <cstdlib>
#include <string>

namespace {

const bool kApplied = [] {
  const char* env = std::getenv("MCX_TEST_ENVIRONMENT");
  if (env == nullptr) return false;
  const std::string all(env);
  size_t at = 0;
  while (at < all.size()) {
    size_t end = all.find(' ', at);
    if (end == std::string::npos) end = all.size();
    const std::string entry = all.substr(at, end - at);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos && eq > 0) setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
    at = end + 1;
  }
  return true;
}();

}  // namespace
