// SecondThread: the second thread of the two-thread probes (scripts/probe_pattern.cpp,
// scripts/probe_prefetch.cpp). One thread for the whole run, as the server's workers are (a thread
// started per call would also give thread-local scratch to a fresh thread each time); it spins
// between calls, so a call starts on both threads at once.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <utility>

class SecondThread {
 public:
  SecondThread() : thread_([this] { loop(); }) {}
  ~SecondThread() {
    job_.store(-1, std::memory_order_release);
    thread_.join();
  }
  SecondThread(const SecondThread&) = delete;
  SecondThread& operator=(const SecondThread&) = delete;

  // Runs fn on the second thread; wait() returns its result.
  void start(std::function<float()> fn) {
    fn_ = std::move(fn);
    job_.fetch_add(1, std::memory_order_release);
  }
  float wait() {
    while (done_.load(std::memory_order_acquire) != job_.load(std::memory_order_relaxed)) {
    }
    return result_;
  }

 private:
  void loop() {
    for (int seen = 0;;) {
      int j;
      while ((j = job_.load(std::memory_order_acquire)) == seen) {
      }
      if (j < 0) return;
      seen = j;
      result_ = fn_();
      done_.store(seen, std::memory_order_release);
    }
  }

  std::atomic<int> job_{0}, done_{0};
  std::function<float()> fn_;
  float result_ = 0;
  std::thread thread_;
};
