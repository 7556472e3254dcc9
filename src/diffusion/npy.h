// Writes float32 arrays as .npy (NumPy's format, version 1.0), so a latent or a traced activation
// opens with numpy.load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace npuflow::diffusion {

Status write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace npuflow::diffusion
