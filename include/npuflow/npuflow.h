/* The public C surface of npuflow: the names a program uses to find the ONNX Runtime plugin EP
 * and the ggml device, and the version they report. Plain C, no other dependency. */
#pragma once

#include "npuflow/version.h"

/* OrtEpDevice::EpName() of the plugin EP; its ep_metadata "version" is NPUFLOW_VERSION. */
#define NPUFLOW_EP_NAME "NpuflowExecutionProvider"
/* The name a program registers the EP library under in the examples and the CLI. */
#define NPUFLOW_EP_REGISTRATION_NAME "npuflow"
/* ggml_backend_dev_name() of the ggml device; its description starts "npuflow <version> on". */
#define NPUFLOW_GGML_DEVICE_NAME "NPUFLOW"
