// The guard every ggml callback of libggml-npuflow.so runs its body through. The module lives in
// someone else's process (llama.cpp, whisper.cpp): an exception must never unwind into ggml's
// frames or end the program. The guard turns it into one logged error and the callback's safe
// answer (supports_op: no, so the CPU backend takes the op; graph_compute: GGML_STATUS_FAILED).
// An abort() or a fatal signal cannot be caught here; code below the guard must not raise them.
#pragma once

#include <exception>
#include <utility>

#include "core/log.h"
#include "core/status.h"

namespace npuflow::ggml {

// Logs an exception that reached a callback's guard; never throws. logger may be null (the
// module's state is not built yet): the line then goes to stderr.
void report_callback_exception(const Logger* logger, const char* callback,
                               const char* what) noexcept;

template <typename R, typename Body>
R guard_callback(const Logger* logger, const char* callback, R safe_answer, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::exception& e) {
    report_callback_exception(logger, callback, e.what());
  } catch (...) {
    report_callback_exception(logger, callback, "an exception of unknown type");
  }
  return safe_answer;
}

// The same for callbacks that return nothing.
template <typename Body>
void guard_void_callback(const Logger* logger, const char* callback, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
  } catch (const std::exception& e) {
    report_callback_exception(logger, callback, e.what());
  } catch (...) {
    report_callback_exception(logger, callback, "an exception of unknown type");
  }
}

// For a step with a fallback below the callback: an exception becomes an error status, which
// the caller handles like any other failure (a MUL_MAT's device step: the host reference reruns).
template <typename Body>
Status status_of(Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const std::exception& e) {
    return internal_error(e.what());
  } catch (...) {
    return internal_error("an exception of unknown type");
  }
}

}  // namespace npuflow::ggml
