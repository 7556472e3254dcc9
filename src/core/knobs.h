// The one knob table (DESIGN.md principle 6). Every knob is an NPUFLOW_* environment variable
// and, under the same short name, an ONNX Runtime provider option. A provider option wins over
// the environment, the environment over the default. docs/knobs.md is checked against this table.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "core/log.h"
#include "core/status.h"

namespace npuflow {

enum class KnobKind { kInt, kBool, kChoice, kLogLevel, kText };

struct KnobSpec {
  const char* name;  // provider option key, e.g. "min_rows"
  const char* env;   // environment variable, e.g. "NPUFLOW_MIN_ROWS"
  KnobKind kind;
  const char* default_value;  // as text, exactly what docs/knobs.md shows
  const char* choices;        // kChoice: '|'-separated; kInt: "min..max"; else ""
  const char* summary;
};

std::span<const KnobSpec> knob_table();
const KnobSpec* find_knob(std::string_view name);

// Resolved values for one session. Lookups of names not in the table are programming errors.
class Knobs {
 public:
  using Lookup = std::function<std::optional<std::string>(const KnobSpec&)>;

  // provider: the runtime's options (may be null); environment: defaults to getenv.
  static Result<Knobs> resolve(const Lookup& provider, const Lookup& environment = nullptr);
  static Knobs defaults();

  const std::string& text(std::string_view name) const;
  int64_t integer(std::string_view name) const;
  bool flag(std::string_view name) const;
  LogLevel log_level() const;
  // Where the value came from: "default", "environment" or "provider option".
  const std::string& origin(std::string_view name) const;

 private:
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> origins_;
};

Knobs::Lookup environment_lookup();

}  // namespace npuflow
