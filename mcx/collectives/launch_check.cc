#include "mcx/collectives/launch_check.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "mcx/core/hash.h"

namespace mcx {
namespace {

std::string program(const LaunchCheck::Wire& w) { return std::string(w.program, strnlen(w.program, sizeof(w.program))); }

std::string describe(const LaunchCheck::Wire& w) {
  return absl::StrCat("'", program(w), "' (fingerprint ", absl::Hex(w.fingerprint, absl::kZeroPad16), ", #",
                      w.sequence, ")");
}

}  // namespace

LaunchCheck::LaunchCheck(const LaunchTag& tag, int process, std::string what, std::string group,
                         std::string mismatch_advice, const std::string& call)
    : what_(std::move(what)), group_(std::move(group)), advice_(std::move(mismatch_advice)) {
  mine_.fingerprint = tag.fingerprint;
  mine_.sequence = tag.sequence;
  mine_.process = process;
  mine_.call_digest = fnv1a64(call);
  std::strncpy(mine_.program, tag.program.c_str(), sizeof(mine_.program) - 1);
  std::strncpy(mine_.call, call.c_str(), sizeof(mine_.call) - 1);
  piggyback_.out = &mine_;
  piggyback_.in = &theirs_;
  piggyback_.bytes = sizeof(Wire);
  piggyback_.check = [this] { return compare(); };
}

absl::Status LaunchCheck::compare() const {
  if (theirs_.fingerprint == mine_.fingerprint && theirs_.sequence == mine_.sequence) {
    if (theirs_.call_digest == mine_.call_digest) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "[", what_, "] the processes of ", group_, " reached the same collective of ", describe(mine_),
        " with different arguments: process ", mine_.process, " calls ",
        std::string(mine_.call, strnlen(mine_.call, sizeof(mine_.call))), ", process ", theirs_.process, " calls ",
        std::string(theirs_.call, strnlen(theirs_.call, sizeof(theirs_.call))), "; ", advice_));
  }
  return absl::FailedPreconditionError(absl::StrCat("[", what_, "] the processes of ", group_,
                                                    " run different computations: process ", mine_.process, " runs ",
                                                    describe(mine_), ", process ", theirs_.process, " runs ",
                                                    describe(theirs_), "; ", advice_));
}

}  // namespace mcx
