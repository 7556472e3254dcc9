// Small string helpers shared by every layer (GCC 12 has no <format>).
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace npuflow {

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::optional<int64_t> parse_int(std::string_view text);
std::string to_lower(std::string_view text);
std::string join(const std::vector<std::string>& parts, std::string_view separator);
std::string shape_string(const std::vector<int64_t>& dims);

}  // namespace npuflow
