#include "diffusion/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "core/json.h"
#include "core/strings.h"

namespace npuflow::diffusion {

int64_t TensorView::elements() const {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

namespace {

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2")
    return 1;
  return 0;
}

}  // namespace

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(str_cat(path, ": not a safetensors file: ", why));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid_argument(str_cat(path, ": cannot open: ", std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return invalid_argument(str_cat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(info.st_size);
  if (size < 8) {
    ::close(fd);
    return bad("shorter than its 8-byte header length");
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return invalid_argument(str_cat(path, ": cannot map the file"));
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->mapped_bytes_ = size;
  const auto* bytes = static_cast<const uint8_t*>(mapping);

  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  if (header_bytes > size - 8) return bad(str_cat("a header of ", header_bytes, " bytes"));
  auto header =
      JsonValue::parse(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_bytes));
  if (!header.is_ok()) return bad(str_cat("header: ", header.status().message()));
  if (header.value().kind() != JsonValue::Kind::kObject) return bad("the header is not an object");
  file->data_ = bytes + 8 + header_bytes;
  const uint64_t data_bytes = size - 8 - header_bytes;

  for (const auto& [name, value] : header.value().object()) {
    if (name == "__metadata__") {
      if (value.kind() != JsonValue::Kind::kObject) return bad("__metadata__ is not an object");
      for (const auto& [key, text] : value.object()) {
        if (text.kind() != JsonValue::Kind::kString)
          return bad(str_cat("metadata ", key, " is not a string"));
        file->metadata_[key] = text.string();
      }
      continue;
    }
    Entry entry;
    entry.dtype = value["dtype"].string();
    const size_t element_bytes = dtype_bytes(entry.dtype);
    if (element_bytes == 0) return bad(str_cat(name, ": dtype '", entry.dtype, "'"));
    const JsonValue& offsets = value["data_offsets"];
    if (value["shape"].kind() != JsonValue::Kind::kArray ||
        offsets.kind() != JsonValue::Kind::kArray || offsets.array().size() != 2)
      return bad(str_cat(name, ": no shape or data_offsets"));
    uint64_t elements = 1;
    for (const JsonValue& dim : value["shape"].array()) {
      const int64_t d = dim.integer(-1);
      if (d < 0 || (d > 0 && elements > std::numeric_limits<uint64_t>::max() / 8 / uint64_t(d)))
        return bad(str_cat(name, ": shape"));
      entry.shape.push_back(d);
      elements *= static_cast<uint64_t>(d);
    }
    const int64_t begin = offsets.array()[0].integer(-1), end = offsets.array()[1].integer(-1);
    if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_bytes)
      return bad(str_cat(name, ": data_offsets [", begin, ", ", end, "] outside ", data_bytes,
                         " bytes of data"));
    if (static_cast<uint64_t>(end - begin) != elements * element_bytes)
      return bad(
          str_cat(name, ": ", end - begin, " bytes for ", elements, " ", entry.dtype, " values"));
    entry.begin = static_cast<uint64_t>(begin);
    entry.end = static_cast<uint64_t>(end);
    file->entries_.emplace(name, std::move(entry));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapped_bytes_);
}

Result<TensorView> SafetensorsFile::tensor(const std::string& name,
                                           const std::vector<int64_t>& shape) const {
  const auto found = entries_.find(name);
  if (found == entries_.end()) return invalid_argument(str_cat(path_, ": no tensor ", name));
  const Entry& entry = found->second;
  if (entry.dtype != "F32")
    return unsupported(str_cat(path_, ": ", name, " is ", entry.dtype, "; only F32 is read"));
  if (entry.shape != shape)
    return invalid_argument(str_cat(path_, ": ", name, " has shape ", shape_string(entry.shape),
                                    ", expected ", shape_string(shape)));
  // Floats are read in place, so they must be aligned; the safetensors library pads its header
  // to 8 bytes, and every writer that follows it gives aligned tensors.
  if (reinterpret_cast<uintptr_t>(data_ + entry.begin) % alignof(float) != 0)
    return invalid_argument(str_cat(path_, ": ", name, " is not 4-byte aligned in the file"));
  TensorView view;
  view.shape = entry.shape;
  view.data = reinterpret_cast<const float*>(data_ + entry.begin);
  return view;
}

std::optional<std::string> SafetensorsFile::metadata(const std::string& key) const {
  const auto found = metadata_.find(key);
  if (found == metadata_.end()) return std::nullopt;
  return found->second;
}

}  // namespace npuflow::diffusion
