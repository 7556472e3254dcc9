// A small JSON reader for npuflow's own reports (the `report` knob's JSON lines). Not a general
// JSON library: no \u escapes beyond ASCII, numbers as double.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace npuflow {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool boolean() const { return boolean_; }
  double number() const { return number_; }
  // The number when it is an integer of at most 2^53 in magnitude, else `otherwise`: a report's
  // counts and sizes, read without the undefined cast of a NaN or huge double.
  int64_t integer(int64_t otherwise = 0) const;
  const std::string& string() const { return string_; }
  const std::vector<JsonValue>& array() const { return array_; }
  const std::map<std::string, JsonValue, std::less<>>& object() const { return object_; }
  // Missing keys read as null.
  const JsonValue& operator[](std::string_view key) const;

  static Result<JsonValue> parse(std::string_view text);

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool boolean_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::map<std::string, JsonValue, std::less<>> object_;
};

}  // namespace npuflow
