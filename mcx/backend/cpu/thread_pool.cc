// The shared CPU thread pool: persistent workers, a queue of jobs, each job split into chunks that workers and
// the calling thread claim dynamically. Several threads may call parallel_for at once (their jobs are queued
// side by side). Calls from inside a chunk run inline.
//
// Lifetime: the pool is created on first use and never destroyed; its workers are joined by the ordered exit
// steps (core/process_exit.h) after the device streams have drained, since stream tasks call parallel_for.
// Once stopped, parallel_for runs on its caller, so work arriving during exit still completes.
#include "mcx/backend/cpu/thread_pool.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mcx/core/config.h"
#include "mcx/core/cpu_affinity.h"
#include "mcx/core/process_exit.h"

namespace mcx::cpu {
namespace {

thread_local bool t_inside_pool = false;
thread_local int t_intra_op_budget = 0;  // 0: no limit beyond num_threads()

// MCX_CPU_THREADS through the core flag registry (0/unset = hardware concurrency); a malformed value
// falls back to the default here (validate_all_flags() reports it at startup).
int threads_from_env() {
  absl::StatusOr<int> n = cpu_threads();
  if (n.ok() && *n >= 1) return std::min(*n, 1024);
  return allowed_cpu_count();
}

struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n = 0;
  int64_t num_chunks = 0;
  int max_helpers = 0;       // workers that may join besides the caller
  int64_t next_chunk = 0;    // guarded by Pool::mu_
  int helpers = 0;           // guarded by Pool::mu_
  int64_t done_chunks = 0;   // guarded by Pool::mu_
  std::exception_ptr error;  // guarded by Pool::mu_
  std::condition_variable done_cv;

  void chunk_range(int64_t c, int64_t* b, int64_t* e) const {
    *b = n * c / num_chunks;
    *e = n * (c + 1) / num_chunks;
  }
};

class Pool {
 public:
  Pool() : num_threads_(threads_from_env()) {
    openblas_set_num_threads(num_threads_);
  }

  // OpenBLAS has one process-wide thread count and one thread server: while any thread runs under a
  // reduced intra-op budget (several device streams at once), GEMMs run single-threaded on their
  // caller, so streams compute side by side instead of queueing on the server.
  void enter_limited() {
    std::lock_guard<std::mutex> lock(blas_mu_);
    if (limited_scopes_++ == 0) openblas_set_num_threads(1);
  }
  void leave_limited() {
    std::lock_guard<std::mutex> lock(blas_mu_);
    if (--limited_scopes_ == 0) openblas_set_num_threads(num_threads());
  }
  // Joins the workers (idempotent). Jobs already queued finish first: their callers work on them too, and
  // a worker leaves only when no job wants helpers. Later calls to run() execute inline.
  void stop() {
    std::vector<std::thread> workers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      workers.swap(workers_);
    }
    work_cv_.notify_all();
    for (auto& t : workers) {
      if (t.get_id() != std::this_thread::get_id()) {
        t.join();
      } else {
        t.detach();  // exit() called from inside a chunk: this thread ends with the process
      }
    }
  }

  void set_num_threads(int n) {
    n = std::max(1, n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      num_threads_ = n;
    }
    std::lock_guard<std::mutex> lock(blas_mu_);
    openblas_set_num_threads(limited_scopes_ > 0 ? 1 : n);
  }
  int num_threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return num_threads_;
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    int threads = num_threads();
    if (t_intra_op_budget > 0) threads = std::min(threads, t_intra_op_budget);
    int64_t max_chunks = (n + grain - 1) / grain;
    if (t_inside_pool || threads <= 1 || max_chunks <= 1) {
      fn(0, n);
      return;
    }
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    job->num_chunks = std::min<int64_t>(max_chunks, 4 * static_cast<int64_t>(threads));
    job->max_helpers = threads - 1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) {  // exiting: no workers any more
        job->max_helpers = 0;
      } else {
        ensure_workers_locked(threads - 1);
        queue_.push_back(job);
        queued_.fetch_add(1, std::memory_order_release);
      }
    }
    work_cv_.notify_all();
    // The caller works on its own job too.
    t_inside_pool = true;
    work_on(job);
    t_inside_pool = false;
    std::unique_lock<std::mutex> lock(mu_);
    job->done_cv.wait(lock, [&] { return job->done_chunks == job->num_chunks; });
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  std::mutex blas_mu_;       // orders OpenBLAS thread-count changes
  int limited_scopes_ = 0;   // guarded by blas_mu_

  void ensure_workers_locked(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      workers_.emplace_back([this] { worker_loop(); });
    }
  }

  // Claims and runs chunks of job until none are left.
  void work_on(const std::shared_ptr<Job>& job) {
    while (true) {
      int64_t c;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (job->next_chunk >= job->num_chunks) return;
        c = job->next_chunk++;
        if (job->next_chunk == job->num_chunks) remove_locked(job.get());
      }
      int64_t b, e;
      job->chunk_range(c, &b, &e);
      std::exception_ptr err;
      try {
        if (e > b) (*job->fn)(b, e);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !job->error) job->error = err;
      if (++job->done_chunks == job->num_chunks) job->done_cv.notify_all();
    }
  }

  void remove_locked(Job* job) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->get() == job) {
        queue_.erase(it);
        return;
      }
    }
  }

  std::shared_ptr<Job> wanting_help_locked() {
    for (auto& j : queue_) {
      if (j->helpers < j->max_helpers && j->next_chunk < j->num_chunks) return j;
    }
    return nullptr;
  }

  // Waits, without the lock, until a job is queued after generation `seen` or kSpinWait passes: an idle
  // worker stays awake briefly, since waking a sleeping thread costs tens of microseconds on bare metal and
  // can cost milliseconds on a virtual machine (whose idle CPU the hypervisor parks), more than many
  // parallel ops take. It yields the core meanwhile, so it delays no other runnable thread.
  void spin_for_work(uint64_t seen) {
    const auto until = std::chrono::steady_clock::now() + kSpinWait;
    while (queued_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
  }

  void worker_loop() {
    t_inside_pool = true;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      std::shared_ptr<Job> job = wanting_help_locked();
      if (job == nullptr && !stop_) {
        const uint64_t seen = queued_.load(std::memory_order_relaxed);
        lock.unlock();
        spin_for_work(seen);
        lock.lock();
        work_cv_.wait(lock, [&] { return stop_ || wanting_help_locked() != nullptr; });
        job = wanting_help_locked();
      }
      if (job == nullptr) return;  // stopping, and no queued job needs a helper
      ++job->helpers;
      lock.unlock();
      work_on(job);
      lock.lock();
    }
  }

  static constexpr std::chrono::microseconds kSpinWait{1000};

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::atomic<uint64_t> queued_{0};  // jobs ever queued: a spinning worker watches it change
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::thread> workers_;
  int num_threads_;
  bool stop_ = false;
};

Pool& pool() {
  static Pool* p = [] {
    auto* created = new Pool();  // never destroyed (see the lifetime note at the top)
    run_at_exit(ExitStage::kCpuThreadPool, [created] { created->stop(); });
    return created;
  }();
  return *p;
}

}  // namespace

void set_num_threads(int n) { pool().set_num_threads(n); }
int num_threads() { return pool().num_threads(); }


int intra_op_threads() {
  int n = num_threads();
  return t_intra_op_budget > 0 ? std::min(n, t_intra_op_budget) : n;
}

ScopedIntraOpThreads::ScopedIntraOpThreads(int n) : previous_(t_intra_op_budget) {
  t_intra_op_budget = std::max(1, n);
  limited_ = t_intra_op_budget < pool().num_threads();
  if (limited_) pool().enter_limited();
}
ScopedIntraOpThreads::~ScopedIntraOpThreads() {
  if (limited_) pool().leave_limited();
  t_intra_op_budget = previous_;
}

ScopedBlasOnCaller::ScopedBlasOnCaller() { pool().enter_limited(); }
ScopedBlasOnCaller::~ScopedBlasOnCaller() { pool().leave_limited(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  pool().run(n, grain, fn);
}

}  // namespace mcx::cpu
