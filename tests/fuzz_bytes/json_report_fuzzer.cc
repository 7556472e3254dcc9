// libFuzzer target: the claim report `explain` and `plan` read back. The EP appends it to a file
// whose path is a knob (or, for the CLI, a predictable name under $TMPDIR), so its bytes are
// untrusted: every line goes through the JSON reader, and the documents it accepts through what
// both commands print and price from them (text, --json and a --plot chart).
//
// It also checks the writer's half of the contract: any name the EP writes (node and graph
// names come from the model) must read back unchanged.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "core/json.h"
#include "graph/claim_report.h"

namespace {

// Every accessor on every node: the consumers may read any of them.
void walk(const npuflow::JsonValue& value, int depth) {
  (void)value.boolean();
  (void)value.number();
  (void)value.string().size();
  (void)value["claims"];
  for (const npuflow::JsonValue& item : value.array()) walk(item, depth + 1);
}

int silence_stdout() {
  std::fflush(stdout);
  const int devnull = ::open("/dev/null", O_WRONLY);
  if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int silenced = silence_stdout();
  (void)silenced;
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const std::string escaped = "\"" + npuflow::json_escape(std::string(input)) + "\"";
  auto round_trip = npuflow::JsonValue::parse(escaped);
  if (!round_trip.is_ok() || round_trip.value().string() != input) {
    std::fprintf(stderr, "json_escape does not read back: %s\n",
                 round_trip.is_ok() ? "changed" : round_trip.status().to_string().c_str());
    std::abort();
  }

  // read_report's rule: one document per non-empty line, a bad line fails the whole report.
  std::vector<npuflow::JsonValue> graphs;
  for (size_t start = 0; start < input.size();) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view line = input.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    auto parsed = npuflow::JsonValue::parse(line);
    if (!parsed.is_ok()) return 0;
    walk(parsed.value(), 0);
    graphs.push_back(std::move(parsed).value());
  }
  npuflow::cli::SessionConfig config;
  config.model_path = "fuzz.onnx";
  npuflow::cli::explain_report(config, graphs);
  npuflow::cli::PlanOptions plan;
  plan.runs = 0;
  plan.plot_path = "/dev/null";
  npuflow::cli::plan_report(nullptr, config, plan, graphs);
  plan.json = true;
  plan.plot_path.clear();
  npuflow::cli::plan_report(nullptr, config, plan, graphs);
  return 0;
}
