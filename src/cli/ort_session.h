// Shared plumbing of the CLI commands: an ONNX Runtime environment with npuflow registered, and
// sessions with or without the npuflow EP.
#pragma once

#include <onnxruntime_cxx_api.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"

namespace npuflow::cli {

struct SessionConfig {
  std::string model_path;
  GraphOptimizationLevel optimization = ORT_ENABLE_ALL;
  int intra_op_threads = 0;
  std::map<std::string, std::string> provider_options;  // npuflow knobs by short name
  std::string profile_prefix;  // non-empty: ONNX Runtime's profiler writes <prefix>_<time>.json
};

class OrtHarness {
 public:
  explicit OrtHarness(const std::string& ep_library);

  Ort::Session cpu_session(const SessionConfig& config);
  Ort::Session npuflow_session(const SessionConfig& config);

 private:
  Ort::Env env_;
  std::vector<Ort::ConstEpDevice> npuflow_devices_;
};

// Random inputs for every model input (int8/uint8 uniform, float and float16 normal; int64 and
// int32 token ids in [0, 64), a mask of ones, type ids 0; bool true), fixed seed; symbolic
// dimensions take `dynamic_dim`, one whose name says batch takes 1.
struct InputSet {
  std::vector<std::string> names;
  std::vector<Ort::Value> values;
  std::vector<std::vector<uint8_t>> storage;
};
InputSet make_inputs(Ort::Session& session, int64_t dynamic_dim, uint32_t seed);
std::vector<std::string> output_names(Ort::Session& session);
std::vector<Ort::Value> run(Ort::Session& session, InputSet& inputs,
                            const std::vector<std::string>& outputs);
double median(std::vector<double> values);

// The command line every command shares: MODEL.onnx, --opt LEVEL, --ep-library PATH and
// --knob NAME=VALUE (a provider option, repeatable); a
// command's own flags go to `own_flag`, which returns true when it consumed args[i] (advancing
// i past a value it took). Returns -1 to go on, or the exit code of a usage error or a missing
// model, already reported on stderr.
int parse_model_command(const char* command, const char* usage,
                        const std::vector<std::string>& args, SessionConfig& config,
                        std::string& ep_library,
                        const std::function<bool(size_t& i)>& own_flag = nullptr);

// Creates (and drops) an npuflow session over config's model with the `report` knob pointed at a
// temporary file, and returns the EP's claim records: as written (one JSON object per graph) or
// parsed.
std::vector<std::string> claim_report_lines(OrtHarness& harness, SessionConfig config,
                                            const std::string& stem);
std::vector<JsonValue> claim_report(OrtHarness& harness, SessionConfig config,
                                    const std::string& stem);

// Default EP library: build/lib next to build/bin/npuflow.
std::string default_ep_library();
bool parse_optimization_level(const std::string& text, GraphOptimizationLevel& out);
const char* optimization_level_name(GraphOptimizationLevel level);

// The JSON lines the EP appended to a report file, one per graph it was offered.
std::vector<JsonValue> read_report(const std::string& path);
// The same lines parsed; throws on one that is not JSON.
std::vector<JsonValue> parse_report(const std::vector<std::string>& lines);
std::string temporary_path(const std::string& stem);

}  // namespace npuflow::cli
