#include "mcx/runtime/stream.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/profiler.h"

namespace mcx {

struct Stream::Impl {
  std::string name;
  mutable std::mutex mu;
  std::condition_variable work_cv;  // the thread waits for tasks or a stop request
  std::condition_variable done_cv;  // synchronize() waits for completed to advance
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0;   // tasks ever queued
  uint64_t completed = 0;  // tasks ever finished
  bool stop_requested = false;
  bool finished = false;   // the thread has left its loop; enqueue runs inline from now on
  std::mutex join_mu;      // serialises joins (shutdown may be called from several threads)
  std::thread thread;
  std::thread::id thread_id;  // set once in the constructor; join() resets thread.get_id(), not this

  void run() {
    // Linux limits thread names to 15 characters; "cpu:123" fits.
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    profiler::set_thread_name(absl::StrCat("stream ", name));
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return !queue.empty() || stop_requested; });
      if (queue.empty()) break;  // stop requested and drained
      std::function<void()> task = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      run_task(task);
      task = nullptr;  // release captures before reporting completion
      lock.lock();
      ++completed;
      done_cv.notify_all();
    }
    finished = true;
    done_cv.notify_all();
  }

  void run_task(const std::function<void()>& task) {
    try {
      task();
    } catch (const std::exception& e) {
      log_error("[stream {}] a task threw (tasks report failures through their outputs): {}", name, e.what());
    } catch (...) {
      log_error("[stream {}] a task threw a non-standard exception", name);
    }
  }
};

Stream::Stream(std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  impl_->thread_id = impl_->thread.get_id();
}

Stream::~Stream() { shutdown(); }

void Stream::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->finished) {
      impl_->queue.push_back(std::move(task));
      ++impl_->enqueued;
      impl_->work_cv.notify_one();
      return;
    }
  }
  // The stream has shut down (process exit): run late work here rather than lose it.
  impl_->run_task(task);
}

absl::Status Stream::synchronize(absl::Time deadline) {
  if (is_current_thread()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[synchronize] called on stream ", impl_->name, "'s own thread; a task cannot wait for its own stream"));
  }
  std::unique_lock<std::mutex> lock(impl_->mu);
  const uint64_t target = impl_->enqueued;
  auto done = [&] { return impl_->completed >= target || impl_->finished; };
  if (deadline == absl::InfiniteFuture()) {
    impl_->done_cv.wait(lock, done);
    return absl::OkStatus();
  }
  if (impl_->done_cv.wait_until(lock, absl::ToChronoTime(deadline), done)) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("[synchronize] stream ", impl_->name, " did not finish its ",
                                                  target - impl_->completed,
                                                  " outstanding task(s) by the deadline"));
}

void Stream::request_stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stop_requested = true;
  impl_->work_cv.notify_all();
}

void Stream::shutdown() {
  request_stop();
  if (is_current_thread()) return;  // e.g. exit() called from a task: the thread cannot join itself
  std::lock_guard<std::mutex> lock(impl_->join_mu);
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool Stream::is_current_thread() const { return impl_->thread_id == std::this_thread::get_id(); }

const std::string& Stream::name() const { return impl_->name; }

absl::Time default_device_deadline() { return value_or_throw(device_deadline_from_now()); }

}  // namespace mcx
