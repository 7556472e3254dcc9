// A read-only safetensors file (the format diffusion checkpoints ship as): an 8-byte header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw data. The
// file is mapped, not copied; tensors are views into the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace npuflow::diffusion {

struct TensorView {
  std::vector<int64_t> shape;
  const float* data = nullptr;  // F32, row-major
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Fails with invalid_argument, naming the file and the problem, for anything that is not a
  // well-formed safetensors file: short, a header length beyond the file, header JSON that does
  // not parse, a tensor whose bytes do not match its shape or lie outside the data.
  static Result<std::shared_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // An F32 tensor of exactly `shape`; invalid_argument when it is missing or differs, unsupported
  // for another dtype.
  Result<TensorView> tensor(const std::string& name, const std::vector<int64_t>& shape) const;
  // The header's __metadata__ entry.
  std::optional<std::string> metadata(const std::string& key) const;
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // within the data section
  };
  SafetensorsFile() = default;

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapped_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace npuflow::diffusion
