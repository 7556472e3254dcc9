#include "core/parallel.h"

#include <cstdint>
#include <exception>
#include <mutex>

namespace npuflow {
namespace {

void omp_parallel_for(int threads, size_t count, const std::function<void(size_t)>& task) {
  const int64_t n = static_cast<int64_t>(count);
  std::mutex mutex;
  std::exception_ptr failure;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      task(static_cast<size_t>(i));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

ExecContext openmp_exec_context(int threads) {
  ExecContext exec;
  if (threads > 1) {
    exec.parallel_for = [threads](size_t count, const std::function<void(size_t)>& task) {
      omp_parallel_for(threads, count, task);
    };
  }
  return exec;
}

}  // namespace npuflow
