// A two-thread pool as ONNX Runtime lends one: tasks split between the caller and a helper
// thread, so the device code under test runs tasks concurrently.
#pragma once

#include <functional>
#include <thread>

#include "core/parallel.h"

namespace npuflow {

inline ExecContext two_threads() {
  ExecContext context;
  context.parallel_for = [](size_t count, const std::function<void(size_t)>& task) {
    std::thread helper([&] {
      for (size_t i = 1; i < count; i += 2) task(i);
    });
    for (size_t i = 0; i < count; i += 2) task(i);
    helper.join();
  };
  return context;
}

}  // namespace npuflow
