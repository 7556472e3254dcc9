// What one run of a session executed, kernel by kernel, from ONNX Runtime's own profiler: op type,
// the execution provider that ran it, and the concrete shapes it saw. `npuflow plan` prices the
// board from this, so it prices the graph ONNX Runtime actually ran (after its fusions and the
// EP's claims), not a copy of its rules.
#pragma once

#include <string>
#include <vector>

#include "cli/ort_session.h"
#include "core/json.h"
#include "core/status.h"

namespace npuflow::cli {

struct ProfiledTensor {
  std::string type;  // ONNX Runtime's name: "float", "int64", "float16", "int8", ...
  std::vector<int64_t> shape;
};

struct ProfiledNode {
  std::string name;
  std::string op_type;
  std::string provider;  // "CPUExecutionProvider", "NpuflowExecutionProvider", ...
  std::vector<ProfiledTensor> inputs, outputs;
};

// The kernel events of a profile (a JSON array of trace events), in run order.
Result<std::vector<ProfiledNode>> parse_profile(const JsonValue& events);

// Runs `session` (created with SessionConfig::profile_prefix set) once on `inputs`, ends its
// profile, reads it and deletes the file.
Result<std::vector<ProfiledNode>> profiled_run(Ort::Session& session, InputSet& inputs);

}  // namespace npuflow::cli
