// oneDNN's OpenMP kernels size their team from the calling thread's nthreads ICV. A task sets it
// for its own primitive and puts the previous value back: tasks run on threads npuflow does not
// own (the caller's, or the pool ONNX Runtime lends), whose OpenMP state must stay as it was found.
#pragma once

#include <omp.h>

namespace npuflow {

class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : previous_(omp_get_max_threads()) {
    if (threads != previous_) omp_set_num_threads(threads);
  }
  ~ScopedOmpThreads() {
    if (omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int previous_;
};

}  // namespace npuflow
