// libFuzzer target: any byte string given to exporting::deserialize must either decode to an artifact that
// validates and re-serialises, or fail with an InvalidArgument "[deserialize] ..." error; never crash,
// hang, or trip ASan/UBSan. Seeds: tests/data/export/*.mcx.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mcx/export/artifact.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = mcx::exporting::deserialize(std::span<const uint8_t>(data, size));
  if (r.ok()) {
    if (!mcx::exporting::validate(*r).ok()) std::abort();
    auto again = mcx::exporting::serialize(*r);
    if (!again.ok()) std::abort();
    // The re-serialised artifact reads back.
    if (!mcx::exporting::deserialize(std::string_view(*again)).ok()) std::abort();
    (void)mcx::exporting::describe(*r);
  } else if (r.status().code() != absl::StatusCode::kInvalidArgument ||
             r.status().message().substr(0, 13) != "[deserialize]") {
    std::abort();
  }
  return 0;
}
