// How a front end lends its runtime's thread pool to the layers below: ONNX Runtime's intra-op
// pool (KernelContext_ParallelFor), so npuflow uses exactly the threads the session was given
// and never a second spinning pool beside it.
#pragma once

#include <cstddef>
#include <functional>

namespace npuflow {

struct ExecContext {
  // Runs task(i) for every i in [0, count), possibly concurrently; null runs them inline.
  std::function<void(size_t count, const std::function<void(size_t)>& task)> parallel_for;

  void run(size_t count, const std::function<void(size_t)>& task) const {
    if (parallel_for && count > 1) {
      parallel_for(count, task);
    } else {
      for (size_t i = 0; i < count; ++i) task(i);
    }
  }
  bool has_pool() const { return static_cast<bool>(parallel_for); }
};

// A pool of `threads` OpenMP workers for front ends that have no runtime pool to lend (ggml's
// backend, the diffusion CLI); 1 or less runs inline. An exception thrown by a task is rethrown
// on the calling thread (one may not leave an OpenMP region).
ExecContext openmp_exec_context(int threads);

}  // namespace npuflow
