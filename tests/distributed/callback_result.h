// Collects the result of a coordination service callback (the service answers blocking calls through
// callbacks): ready() without waiting, get() waits up to 5 s and fails the test when nothing came.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "mcx/distributed/coordination/service.h"

namespace mcx::distributed {

template <typename T>
struct Result {
  std::shared_ptr<std::promise<T>> p = std::make_shared<std::promise<T>>();
  std::shared_future<T> f = p->get_future().share();
  Callback<T> cb() {
    return [p = p](T v) { p->set_value(std::move(v)); };
  }
  bool ready() const { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  T get() const {
    EXPECT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    return f.get();
  }
};

}  // namespace mcx::distributed
