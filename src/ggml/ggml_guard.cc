#include "ggml/ggml_guard.h"

#include <cstdio>
#include <string>

namespace npuflow::ggml {

void report_callback_exception(const Logger* logger, const char* callback,
                               const char* what) noexcept {
  try {
    if (logger != nullptr) {
      logger->error(std::string("ggml callback ") + callback + " caught an exception (" + what +
                    "); answering safely instead");
      return;
    }
  } catch (...) {
    // Logging itself failed (out of memory): fall through to a plain line.
  }
  std::fprintf(stderr, "npuflow [error] ggml callback %s caught an exception (%s)\n", callback,
               what);
}

}  // namespace npuflow::ggml
