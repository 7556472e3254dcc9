#include "diffusion/npy.h"

#include <cstdio>
#include <cstring>

#include "core/strings.h"

namespace npuflow::diffusion {

Status write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ",";
    count *= d;
  }
  if (shape.size() > 1) dims.pop_back();  // (n,) keeps its comma; (a,b) has none at the end
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes, ending in \n.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr)
    return invalid_argument(str_cat(path, ": cannot write: ", std::strerror(errno)));
  const unsigned char preamble[10] = {0x93,
                                      'N',
                                      'U',
                                      'M',
                                      'P',
                                      'Y',
                                      1,
                                      0,
                                      static_cast<unsigned char>(header.size() & 0xff),
                                      static_cast<unsigned char>(header.size() >> 8)};
  bool ok = std::fwrite(preamble, 1, sizeof(preamble), out) == sizeof(preamble) &&
            std::fwrite(header.data(), 1, header.size(), out) == header.size() &&
            std::fwrite(data, sizeof(float), static_cast<size_t>(count), out) ==
                static_cast<size_t>(count);
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) return invalid_argument(str_cat(path, ": write failed"));
  return Status::ok();
}

}  // namespace npuflow::diffusion
