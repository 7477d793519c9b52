#include "mcx/core/launch_check.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace mcx {
namespace {

std::string describe(const LaunchCheck::Wire& w) {
  return absl::StrCat("'", std::string(w.program, strnlen(w.program, sizeof(w.program))), "' (fingerprint ",
                      absl::Hex(w.fingerprint, absl::kZeroPad16), ", #", w.sequence, ")");
}

}  // namespace

LaunchCheck::LaunchCheck(const LaunchTag& tag, int process, std::string what, std::string group,
                         std::string mismatch_advice)
    : what_(std::move(what)), group_(std::move(group)), advice_(std::move(mismatch_advice)) {
  mine_.fingerprint = tag.fingerprint;
  mine_.sequence = tag.sequence;
  mine_.process = process;
  std::strncpy(mine_.program, tag.program.c_str(), sizeof(mine_.program) - 1);
  piggyback_.out = &mine_;
  piggyback_.in = &theirs_;
  piggyback_.bytes = sizeof(Wire);
  piggyback_.check = [this] { return compare(); };
}

absl::Status LaunchCheck::compare() const {
  if (theirs_.fingerprint == mine_.fingerprint && theirs_.sequence == mine_.sequence) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("[", what_, "] the processes of ", group_,
                                                    " run different computations: process ", mine_.process, " runs ",
                                                    describe(mine_), ", process ", theirs_.process, " runs ",
                                                    describe(theirs_), "; ", advice_));
}

}  // namespace mcx
