#include "mcx/collectives/collective_group.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

namespace mcx {

absl::Status group_unusable(std::string_view what, std::string_view description, const absl::Status& first_error) {
  return with_payloads_of(absl::AbortedError(absl::StrCat("[", std::string(what), "] ", std::string(description),
                                                          " is unusable after an earlier error: ",
                                                          first_error.message())),
                          first_error);
}

}  // namespace mcx
