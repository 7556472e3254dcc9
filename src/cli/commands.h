// The CLI's subcommands; each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace npuflow::cli {

int explain_command(const std::vector<std::string>& args);
int demo_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);

}  // namespace npuflow::cli
