// ClockOffsetEstimate: this process's trace clock against the coordination service's, from heartbeat round trips
// (as NTP does with one server): a heartbeat sent at local time s and answered at local time r, the service's
// clock reading c in between, gives offset = c - (s + r) / 2 within +-(r - s) / 2, whatever the split of the round
// trip between the two directions. Of the last kWindow samples the one with the shortest round trip is the
// estimate (a recent window, since the two clocks drift apart by parts per million). Each new estimate goes to
// the profiler (profiler::set_reference_clock), which records it in traces so that they merge onto one clock.
// Thread-safety: one thread (the agent's heartbeat thread).
#pragma once

#include <cstdint>
#include <deque>

namespace mcx::distributed {

class ClockOffsetEstimate {
 public:
  static constexpr int kWindow = 32;

  struct Sample {
    int64_t offset_us = 0;  // service clock - local clock
    int64_t error_us = 0;   // half the round trip (at least 1: the clocks' resolution)
  };

  // One round trip: sent and received on this process's trace clock, service_us the service's reading. A
  // received < sent (a clock that went backwards) is ignored.
  void add(int64_t sent_us, int64_t service_us, int64_t received_us);
  // The current estimate; error -1 before any sample.
  Sample estimate() const;

 private:
  std::deque<Sample> window_;
};

}  // namespace mcx::distributed
