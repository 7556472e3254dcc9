#include "core/log.h"

#include <cstdio>

#include "core/strings.h"

namespace npuflow {

std::optional<LogLevel> parse_log_level(std::string_view text) {
  const std::string lower = to_lower(text);
  if (lower == "error") return LogLevel::kError;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "verbose") return LogLevel::kVerbose;
  if (lower == "trace") return LogLevel::kTrace;
  return std::nullopt;
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kVerbose:
      return "verbose";
    case LogLevel::kTrace:
      return "trace";
  }
  return "?";
}

Logger::Logger()
    : threshold_(LogLevel::kWarning), sink_([](LogLevel level, const std::string& message) {
        std::fprintf(stderr, "npuflow [%s] %s\n", log_level_name(level), message.c_str());
      }) {}

}  // namespace npuflow
