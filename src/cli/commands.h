// The CLI's subcommands; each returns the process exit code.
#pragma once

#include <string>
#include <vector>

#include "cli/ort_profile.h"
#include "cli/ort_session.h"
#include "core/json.h"

namespace npuflow::cli {

int explain_command(const std::vector<std::string>& args);
int demo_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);
int diffuse_command(const std::vector<std::string>& args);
int plan_dit_command(const std::vector<std::string>& args);

// What `explain` and `plan` print from the EP's report once the session is gone; apart from the
// commands so the fuzz targets (tests/fuzz_bytes) can feed them reports and models directly.
struct PlanOptions {
  std::string plot_path;
  bool json = false;
  int64_t rows = 128;
  int workers = 5;
  int runs = 5;                   // CPU EP runs timed on this machine; needs a harness
  bool attention_on_npu = false;  // --attention npu
};
int explain_report(const SessionConfig& config, const std::vector<JsonValue>& graphs);
// `cpu_only` and `with_npuflow`: profiled runs for whole-graph pricing (cli/plan_pricing.h);
// without them the plan prices the report's claims and host GEMMs only.
int plan_report(OrtHarness* harness, const SessionConfig& config, const PlanOptions& options,
                const std::vector<JsonValue>& graphs,
                const std::vector<ProfiledNode>* cpu_only = nullptr,
                const std::vector<ProfiledNode>* with_npuflow = nullptr);

}  // namespace npuflow::cli
