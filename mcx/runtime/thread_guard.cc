#include "mcx/runtime/thread_guard.h"

#include <pthread.h>
#include <unistd.h>

#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mcx/core/config.h"

namespace mcx {
namespace {

// The one guard of the process: which thread holds it and how deeply it is nested there.
struct GuardState {
  std::mutex mu;
  std::optional<std::thread::id> owner;
  std::string owner_description;
  int depth = 0;
};

// With MCX_THREAD_GUARD=1 and no owner yet, the calling thread takes the guard for the rest of the process (a
// depth that is never given back).
void take_process_wide_guard(GuardState& s, bool process_wide) {
  if (!process_wide || s.owner) return;
  s.owner = std::this_thread::get_id();
  s.owner_description = current_thread_description() + " (MCX_THREAD_GUARD=1)";
  ++s.depth;
}
GuardState& state() {
  static GuardState* s = new GuardState();  // never destroyed: guards may be released during exit
  return *s;
}

}  // namespace

std::string current_thread_description() {
  std::string out = absl::StrFormat("thread 0x%x (tid %d", static_cast<uint64_t>(pthread_self()),
                                    static_cast<int>(gettid()));
  char name[64] = {0};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0 && name[0] != '\0') {
    absl::StrAppend(&out, ", '", name, "'");
  }
  out += ")";
  return out;
}

ThreadGuard::ThreadGuard() {
  GuardState& s = state();
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.owner) take_process_wide_guard(s, kThreadGuardFlag.value());  // the flag is read until someone owns it
  if (s.owner && *s.owner != me) {
    throw ThreadGuardError(absl::StrCat("[thread_guard] cannot open a thread guard in ", current_thread_description(),
                                        ": ", s.owner_description,
                                        " already holds one; only one thread may issue process-spanning "
                                        "computations at a time"));
  }
  if (!s.owner) {
    s.owner = me;
    s.owner_description = current_thread_description();
  }
  ++s.depth;
}

ThreadGuard::~ThreadGuard() {
  GuardState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  // Guards are neither copyable nor movable, so the destructor runs in the owning thread.
  if (s.depth > 0 && --s.depth == 0) {
    s.owner.reset();
    s.owner_description.clear();
  }
}

bool thread_guard_active() {
  GuardState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.owner.has_value();
}

void check_thread_guard(bool spans_processes, std::string_view what) {
  if (!spans_processes) return;
  GuardState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.owner) take_process_wide_guard(s, kThreadGuardFlag.value());  // the flag is read until someone owns it
  if (!s.owner || *s.owner == std::this_thread::get_id()) return;
  throw ThreadGuardError(absl::StrCat("[thread_guard] ", std::string(what), " spans processes and was issued from ",
                                      current_thread_description(), " while ", s.owner_description,
                                      " holds the thread guard; issue process-spanning computations only from "
                                      "the guarded thread, so every process runs them in the same order"));
}

}  // namespace mcx
