// Stand-in for stable-diffusion.cpp's ggml_extend.hpp: spectrum.hpp needs only GGML_ASSERT from
// it (and std::max, which it takes from the headers this one pulls in there).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#define GGML_ASSERT(condition)                                           \
  do {                                                                   \
    if (!(condition)) {                                                  \
      std::fprintf(stderr, "sd.cpp assertion failed: %s\n", #condition); \
      std::abort();                                                      \
    }                                                                    \
  } while (0)
