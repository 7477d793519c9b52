// preemption_worker: a step loop that stops at the preemption sync point (preemption_test.cc).
//
//   preemption_worker job|single STEP_MS [recoverable|notify]
//
// job: joins the job (mcx::distributed::initialize from the environment); single: no initialize. Process p
// sleeps STEP_MS * (p + 1) ms per step, so the processes run at different speeds and are at different steps
// when the notice comes; process p starts at step 10 * p (steps need only grow by one per call). With
// "recoverable" a failed process is only noted (the job survives it); with "notify" the last process calls
// mcx::multihost::notify_preemption() at its 20th step instead of waiting for a signal. Prints "READY" once SIGTERM is a notice,
// "SYNC step=<s>" when reached_preemption_sync_point returns true (then leaves the job and exits 0),
// "ERROR <what>" (exit 1) on an exception, "NOSYNC" (exit 2) when no sync point came within 20 s.
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "mcx/distributed/distributed.h"
#include "mcx/multihost/preemption.h"
#include "tests/distributed/multiprocess/worker_output.h"

using mcx::mptest::one_line;
using mcx::mptest::print_line;

int main(int argc, char** argv) {
  if (argc < 3) {
    print_line("usage: preemption_worker job|single STEP_MS [recoverable|notify]");
    return 2;
  }
  const bool job = std::string(argv[1]) == "job";
  const int step_ms = std::atoi(argv[2]);
  const bool recoverable = argc > 3 && std::string(argv[3]) == "recoverable";
  const bool notify = argc > 3 && std::string(argv[3]) == "notify";
  try {
    int process = 0, processes = 1;
    if (job) {
      mcx::distributed::InitializeOptions options;
      if (recoverable) {
        options.on_failure = [](const mcx::distributed::TaskFailure& f) {
          print_line(absl::StrCat("NOTE task ", f.task, " failed"));
        };
      }
      mcx::distributed::initialize(options);
      process = mcx::distributed::agent()->task_id();
      processes = mcx::distributed::agent()->num_tasks();
    }
    mcx::multihost::enable_preemption_sync();  // SIGTERM is a notice from here on
    print_line("READY");
    const absl::Duration pause = absl::Milliseconds(step_ms * (process + 1));
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    for (int64_t step = 10 * process; absl::Now() < give_up; ++step) {
      if (notify && process == processes - 1 && step == 10 * process + 20) {
        mcx::multihost::notify_preemption(absl::StrCat("process ", process, " was told by its scheduler"));
      }
      if (mcx::multihost::reached_preemption_sync_point(step)) {
        print_line(absl::StrCat("SYNC step=", step));
        if (job) mcx::distributed::shutdown();
        return 0;
      }
      absl::SleepFor(pause);  // the step's work
    }
    print_line("NOSYNC");
    return 2;
  } catch (const std::exception& e) {
    print_line(absl::StrCat("ERROR ", one_line(e.what())));
    return 1;
  }
}
