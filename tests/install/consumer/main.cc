// A user program built against an installed mcx with find_package(mcx) (tests/install/check_install.sh).
#include <cstdio>
#include "mcx/mcx.h"
int main() {
  auto f = mcx::jit([](const mcx::Array& x) { return mcx::sum(mcx::exp(x)); });
  auto g = mcx::grad([](const mcx::Array& x) { return mcx::sum(x * x); });
  mcx::Array x = mcx::array({0.0f, 1.0f});
  std::printf("%s %s\n", f(x).to_string().c_str(), g(x).to_string().c_str());
}
