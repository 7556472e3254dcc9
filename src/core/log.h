// Leveled logging with a replaceable sink. The ONNX Runtime front end points the sink at ORT's
// logger; the CLI and unit tests use stderr. The threshold comes from the `log` knob.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace npuflow {

enum class LogLevel { kError = 0, kWarning, kInfo, kVerbose, kTrace };

std::optional<LogLevel> parse_log_level(std::string_view text);
const char* log_level_name(LogLevel level);

class Logger {
 public:
  using Sink = std::function<void(LogLevel, const std::string&)>;

  Logger();  // stderr sink, warning threshold
  Logger(LogLevel threshold, Sink sink) : threshold_(threshold), sink_(std::move(sink)) {}

  bool enabled(LogLevel level) const { return level <= threshold_; }
  void log(LogLevel level, const std::string& message) const {
    if (enabled(level)) sink_(level, message);
  }
  void error(const std::string& m) const { log(LogLevel::kError, m); }
  void warning(const std::string& m) const { log(LogLevel::kWarning, m); }
  void info(const std::string& m) const { log(LogLevel::kInfo, m); }
  void verbose(const std::string& m) const { log(LogLevel::kVerbose, m); }
  void trace(const std::string& m) const { log(LogLevel::kTrace, m); }

  LogLevel threshold() const { return threshold_; }
  void set_threshold(LogLevel level) { threshold_ = level; }

 private:
  LogLevel threshold_;
  Sink sink_;
};

}  // namespace npuflow
