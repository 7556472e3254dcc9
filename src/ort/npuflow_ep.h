// The OrtEp of one session: reads the knobs, claims QDQ MatMul groups and encoders in
// GetCapability and compiles each fused node into a kernel (with `verify`, also its host
// reference and the ClaimVerifier that checks one against the other).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/knobs.h"
#include "core/log.h"
#include "device/device.h"
#include "graph/claim.h"
#include "graph/quantized_view.h"
#include "npuflow/npuflow.h"
#include "ort/ort_api.h"

namespace npuflow::ort {

constexpr const char* kEpName = NPUFLOW_EP_NAME;

class NpuflowEp : public OrtEp {
 public:
  static Result<std::unique_ptr<NpuflowEp>> create(const OrtSessionOptions* session_options,
                                                   const OrtLogger* session_logger);
  ~NpuflowEp();

  const Logger& logger() const { return logger_; }

 private:
  NpuflowEp(Knobs knobs, Logger logger, std::shared_ptr<Device> device,
            std::shared_ptr<Device> host, bool verify);

  Status get_capability(const OrtGraph* graph, OrtEpGraphSupportInfo* support);
  Status compile_one(const OrtGraph* graph, const OrtNode* fused_node, OrtNodeComputeInfo** out);
  Status compile_qdq(const GraphView& view, const QdqMatMulClaim& claim, const OrtNode* fused_node,
                     OrtNodeComputeInfo** out);
  Status compile_integer(const GraphView& view, const IntegerMatMulClaim& claim,
                         const OrtNode* fused_node, OrtNodeComputeInfo** out);
  Status compile_program(const GraphView& view, const TensorProgram& program,
                         const OrtNode* fused_node, OrtNodeComputeInfo** out);
  // `quantized`: the float reading `view` is, for a claim made on one (its dynamic int8 weights).
  Status compile_encoder(const GraphView& view, const VisionEncoderClaim& claim,
                         const OrtNode* fused_node, OrtNodeComputeInfo** out,
                         const DequantizedView* quantized = nullptr);
  Status compile_conv_transpose(const GraphView& view, const ConvTransposeClaim& claim,
                                const OrtNode* fused_node, OrtNodeComputeInfo** out);
  Status compile_conv(const GraphView& view, const ConvClaim& claim, const OrtNode* fused_node,
                      OrtNodeComputeInfo** out);
  // Both of the above (ort/convolution_compile.cc).
  template <typename Kernel, typename ClaimT>
  Status compile_convolution(const GraphView& view, const ClaimT& claim, const char* what,
                             int64_t weight_count, int64_t out_channels,
                             std::vector<std::shared_ptr<const Kernel>>& kept,
                             const OrtNode* fused_node, OrtNodeComputeInfo** out);
  void write_report(const std::string& json_line) const;

  static const char* ORT_API_CALL GetNameImpl(const OrtEp* self) noexcept;
  static OrtStatus* ORT_API_CALL GetCapabilityImpl(OrtEp* self, const OrtGraph* graph,
                                                   OrtEpGraphSupportInfo* support) noexcept;
  static OrtStatus* ORT_API_CALL CompileImpl(OrtEp* self, const OrtGraph** graphs,
                                             const OrtNode** fused_nodes, size_t count,
                                             OrtNodeComputeInfo** infos,
                                             OrtNode** ep_context_nodes) noexcept;
  static void ORT_API_CALL ReleaseNodeComputeInfosImpl(OrtEp* self, OrtNodeComputeInfo** infos,
                                                       size_t count) noexcept;

  Knobs knobs_;
  Logger logger_;
  std::shared_ptr<Device> device_;
  std::shared_ptr<Device> host_;  // the session's host reference beside another device, else null
  std::shared_ptr<Device> reference_device_;  // host_, when `verify` checks the device
  std::mutex mutex_;
  std::map<std::string, QdqMatMulClaim> claims_by_output_;  // GetCapability -> Compile
  std::map<std::string, IntegerMatMulClaim> integer_claims_by_output_;
  std::map<std::string, VisionEncoderClaim> encoders_by_exit_;
  std::map<std::string, TensorProgram> programs_by_output_;  // the program_ops test knob
  std::map<std::string, ConvTransposeClaim> conv_transposes_by_output_;
  std::map<std::string, ConvClaim> convs_by_output_;
  bool intra_op_spinning_ = true;  // session.intra_op.allow_spinning, for the ConvTranspose warning
  std::atomic<bool> spinning_warned_{false};
  // NPUFLOW_QUANT=strict: why an unplaced quantized encoder fails the session, by the output of
  // the one node claimed so that its Compile can fail (ORT logs and ignores GetCapability errors).
  std::map<std::string, std::string> strict_failures_by_output_;
  struct Totals;
  std::unique_ptr<Totals> totals_;
};

}  // namespace npuflow::ort
