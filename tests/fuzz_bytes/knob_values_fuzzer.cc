// libFuzzer target: knob values as they arrive from the environment and from ONNX Runtime provider
// options, i.e. from whoever starts the process or builds the session.
//
// Input: lines "NAME=VALUE"; a NAME that starts with "NPUFLOW_" is an environment variable, any
// other a provider option (both may name the same knob; unknown names are ignored, as the EP
// ignores them). Every resolved knob is then read back the way the EP reads it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "core/knobs.h"
#include "route/device_selection.h"

namespace {

using Options = std::map<std::string, std::string, std::less<>>;

npuflow::Knobs::Lookup lookup_in(const Options& options, bool by_env_name) {
  return [&options, by_env_name](const npuflow::KnobSpec& spec) -> std::optional<std::string> {
    auto it = options.find(by_env_name ? spec.env : spec.name);
    if (it == options.end()) return std::nullopt;
    return it->second;
  };
}

void read_back(const npuflow::Knobs& knobs) {
  for (const npuflow::KnobSpec& spec : npuflow::knob_table()) {
    const std::string& text = knobs.text(spec.name);
    if (knobs.origin(spec.name).empty()) std::abort();
    switch (spec.kind) {
      case npuflow::KnobKind::kInt:
        (void)knobs.integer(spec.name);
        break;
      case npuflow::KnobKind::kBool:
        (void)knobs.flag(spec.name);
        break;
      case npuflow::KnobKind::kLogLevel:
        (void)knobs.log_level();
        break;
      case npuflow::KnobKind::kChoice:
      case npuflow::KnobKind::kText:
        (void)text.size();
        break;
    }
  }
  (void)npuflow::device_config_from(knobs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Options environment, provider;
  for (size_t start = 0; start < input.size();) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view line = input.substr(start, end - start);
    start = end + 1;
    const size_t equals = line.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string name(line.substr(0, equals));
    // Both sources hand npuflow C strings: a value ends at its first NUL.
    std::string value(line.substr(equals + 1));
    value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
    (name.rfind("NPUFLOW_", 0) == 0 ? environment : provider)[name] = value;
  }
  auto knobs = npuflow::Knobs::resolve(lookup_in(provider, false), lookup_in(environment, true));
  if (knobs.is_ok()) {
    read_back(knobs.value());
  } else if (knobs.status().message().empty()) {
    std::abort();  // a refusal must say why
  }
  return 0;
}
