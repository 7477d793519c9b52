#include "mcx/data/loader_state.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace mcx::data {

std::string LoaderState::to_string() const {
  return absl::StrCat("mcx-data-v1 seed=", seed, " epoch=", epoch, " position=", position, " examples=", num_examples);
}

absl::StatusOr<LoaderState> parse_loader_state(const std::string& text) {
  LoaderState s;
  unsigned long long seed = 0;
  long long epoch = 0, position = 0, examples = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "mcx-data-v1 seed=%llu epoch=%lld position=%lld examples=%lld%n", &seed, &epoch, &position,
                  &examples, &consumed) != 4 ||
      static_cast<size_t>(consumed) != text.size() || epoch < 0 || position < 0 || examples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[data] loader state: expected 'mcx-data-v1 seed=<u64> epoch=<n> position=<n> examples=<n>', found '", text, "'"));
  }
  s.seed = seed;
  s.epoch = epoch;
  s.position = position;
  s.num_examples = examples;
  return s;
}

}  // namespace mcx::data
