// The CLI loads ONNX Runtime at run time instead of linking it, so one binary runs on whichever
// runtime the user has: a pip-installed onnxruntime (the wheel's console script points at it), a
// system library, or a libonnxruntime.so.1 beside the binary (build tree, install prefix, board
// tarball).
#pragma once

#include <string>

namespace npuflow::cli {

// Loads ONNX Runtime (NPUFLOW_ORT_LIBRARY if set; else lib/libonnxruntime.so.1 beside the
// binary's bin/, else libonnxruntime.so.1 through the run path and the system's search path) and
// points the C++ API at the highest API version it offers, down to the EP's floor. Throws
// std::runtime_error saying what was tried. Idempotent.
void load_onnxruntime();

// The loaded runtime's version string ("1.31.1"); load_onnxruntime() must have succeeded.
std::string onnxruntime_version();

}  // namespace npuflow::cli
