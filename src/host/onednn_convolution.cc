#include "host/onednn_convolution.h"

#include <algorithm>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>

#include "core/strings.h"
#include "host/scoped_omp_threads.h"

namespace npuflow {
namespace {

using dnnl_dt = dnnl::memory::data_type;
using dnnl_tag = dnnl::memory::format_tag;

// Output rows per band: a band is a task of its own, and about eight of them give every pool
// thread work while each still holds enough rows for oneDNN's kernels.
int64_t band_count(int64_t oh) {
  return std::clamp<int64_t>(oh / 4, 1, 8);
}

// One CPU engine for every plan, so a reordered weight made for one input size serves another.
const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

}  // namespace

// The image is cut into bands of output rows; each band is a convolution of its own over the
// input rows it reads (its halo included, the image's padding where it reaches the edge), so no
// task reads another's rows and every band's input and output are strided views of the image's.
struct OneDnnConvolution::Plan {
  struct Band {
    int64_t out_first = 0, out_rows = 0;  // output rows [out_first, out_first + out_rows)
    int64_t in_first = 0, in_rows = 0;    // the input rows it reads
    dnnl::convolution_forward primitive;
    dnnl::memory::desc src, dst, scratchpad;  // the layouts oneDNN chose
    dnnl::memory weight;
  };
  std::vector<Band> bands;
  dnnl::memory bias;
};

OneDnnConvolution::OneDnnConvolution(const ConvolutionGeometry& geometry) : geometry_(geometry) {}
OneDnnConvolution::~OneDnnConvolution() = default;

Result<std::unique_ptr<OneDnnConvolution>> OneDnnConvolution::create(
    const ConvolutionGeometry& geometry, const float* weight, const float* bias) {
  const ConvolutionGeometry& g = geometry;
  if (g.ic <= 0 || g.oc <= 0 || g.kh <= 0 || g.kw <= 0 || weight == nullptr) {
    return invalid_argument("a oneDNN convolution needs positive sizes and a weight");
  }
  std::unique_ptr<OneDnnConvolution> op(new OneDnnConvolution(geometry));
  op->weight_.assign(weight, weight + g.oc * g.ic * g.kh * g.kw);
  op->bias_.assign(static_cast<size_t>(g.oc), 0.0f);
  if (bias) std::copy(bias, bias + g.oc, op->bias_.begin());
  return op;
}

dnnl::memory OneDnnConvolution::reordered_weight(const Plan& building,
                                                 const dnnl::memory::desc& layout) const {
  auto find = [&](const Plan& plan) -> dnnl::memory {
    for (const Plan::Band& band : plan.bands) {
      if (band.weight.get_desc() == layout) return band.weight;
    }
    return {};
  };
  if (dnnl::memory found = find(building)) return found;
  for (const auto& [size, plan] : plans_) {
    if (!plan) continue;  // the entry being built
    if (dnnl::memory found = find(*plan)) return found;
  }
  return {};
}

Result<const OneDnnConvolution::Plan*> OneDnnConvolution::plan_for(int64_t ih, int64_t iw) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = plans_[{ih, iw}];
  if (slot) return slot.get();
  // oneDNN's primitive creation is not something two threads should race through (ThreadSanitizer
  // sees its internal caches written unlocked when two nodes plan at once): one plan at a time
  // process-wide, taken after this kernel's own lock, always in that order.
  static std::mutex creation;
  std::lock_guard<std::mutex> creating(creation);
  const ConvolutionGeometry& g = geometry_;
  const int64_t reach_y = g.dil_y * (g.kh - 1);
  const int64_t oh = (ih + g.pad_top + g.pad_bottom - reach_y - 1) / g.stride_y + 1;
  const int64_t ow = (iw + g.pad_left + g.pad_right - g.dil_x * (g.kw - 1) - 1) / g.stride_x + 1;
  // Bands only where every band reads at least one input row (pads wider than the kernel can
  // leave an edge band all padding); else the image is one band.
  int64_t bands = band_count(oh);
  auto band_rows = [&](int64_t band, int64_t count) {
    const int64_t first = oh * band / count, last = oh * (band + 1) / count;
    const int64_t lo = first * g.stride_y - g.pad_top;
    const int64_t hi = (last - 1) * g.stride_y - g.pad_top + reach_y;
    return std::tuple{first, last - first, lo, hi};
  };
  for (int64_t b = 0; b < bands; ++b) {
    const auto [first, rows, lo, hi] = band_rows(b, bands);
    if (std::min(hi, ih - 1) < std::max<int64_t>(lo, 0)) bands = 1;
  }
  try {
    auto plan = std::make_unique<Plan>();
    dnnl::stream stream(cpu_engine());
    const dnnl::memory::desc bias_desc({g.oc}, dnnl_dt::f32, dnnl_tag::x);
    plan->bias = dnnl::memory(bias_desc, cpu_engine(), const_cast<float*>(bias_.data()));
    const dnnl::memory::desc plain_weight({g.oc, g.ic, g.kh, g.kw}, dnnl_dt::f32, dnnl_tag::oihw);
    dnnl::memory source(plain_weight, cpu_engine(), const_cast<float*>(weight_.data()));
    for (int64_t b = 0; b < bands; ++b) {
      const auto [first, rows, lo, hi] = band_rows(b, bands);
      Plan::Band band;
      band.out_first = first;
      band.out_rows = rows;
      band.in_first = std::max<int64_t>(lo, 0);
      band.in_rows = std::min(hi, ih - 1) - band.in_first + 1;
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::convolution_forward::primitive_desc pd(
          dnnl::convolution_forward::desc(
              dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
              {{1, g.ic, band.in_rows, iw}, dnnl_dt::f32, dnnl_tag::any},
              {{g.oc, g.ic, g.kh, g.kw}, dnnl_dt::f32, dnnl_tag::any}, bias_desc,
              {{1, g.oc, rows, ow}, dnnl_dt::f32, dnnl_tag::any}, {g.stride_y, g.stride_x},
              {g.dil_y - 1, g.dil_x - 1},  // oneDNN counts the gaps
              {band.in_first - lo, g.pad_left},
              {hi - (band.in_first + band.in_rows - 1), g.pad_right}),
          attr, cpu_engine());
      band.primitive = dnnl::convolution_forward(pd);
      band.src = pd.src_desc();
      band.dst = pd.dst_desc();
      band.scratchpad = pd.scratchpad_desc();
      // Bands and input sizes choose one weight layout as a rule: a weight already reordered to
      // this band's layout is shared, and only a layout not seen yet is made.
      band.weight = reordered_weight(*plan, pd.weights_desc());
      if (!band.weight) {
        band.weight = dnnl::memory(pd.weights_desc(), cpu_engine());
        dnnl::reorder(source, band.weight).execute(stream, source, band.weight);
      }
      plan->bands.push_back(std::move(band));
    }
    stream.wait();
    slot = std::move(plan);
    return slot.get();
  } catch (const dnnl::error& e) {
    plans_.erase({ih, iw});
    return Status(StatusCode::kDeviceFailure,
                  str_cat("oneDNN has no ", g.kh, "x", g.kw, " convolution for a ", ih, "x", iw,
                          " input: ", e.what()));
  }
}

Status OneDnnConvolution::run(const float* x, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                              float* y, const ExecContext& context) const {
  auto planned = plan_for(ih, iw);
  if (!planned.is_ok()) return planned.status();
  const Plan& plan = *planned.value();
  const ConvolutionGeometry& g = geometry_;
  std::string failure;
  std::mutex failure_mutex;
  context.run(plan.bands.size(), [&](size_t index) {
    const Plan::Band& band = plan.bands[index];
    try {
      const ScopedOmpThreads team(1);
      thread_local std::vector<uint8_t> in, out, scratch;
      in.resize(std::max(in.size(), band.src.get_size()));
      out.resize(std::max(out.size(), band.dst.get_size()));
      scratch.resize(std::max(scratch.size(), band.scratchpad.get_size()));
      dnnl::stream stream(cpu_engine());
      // The band's rows of every channel plane, and of y's: strided views of the images.
      const dnnl::memory::desc x_view({1, g.ic, band.in_rows, iw}, dnnl_dt::f32,
                                      dnnl::memory::dims{g.ic * ih * iw, ih * iw, iw, 1});
      const dnnl::memory::desc y_view({1, g.oc, band.out_rows, ow}, dnnl_dt::f32,
                                      dnnl::memory::dims{g.oc * oh * ow, oh * ow, ow, 1});
      dnnl::memory x_band(x_view, cpu_engine(), const_cast<float*>(x + band.in_first * iw));
      dnnl::memory y_band(y_view, cpu_engine(), y + band.out_first * ow);
      dnnl::memory src(band.src, cpu_engine(), in.data());
      dnnl::memory dst(band.dst, cpu_engine(), out.data());
      dnnl::memory scratchpad(band.scratchpad, cpu_engine(), scratch.data());
      dnnl::reorder(x_band, src).execute(stream, x_band, src);
      band.primitive.execute(stream, {{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_WEIGHTS, band.weight},
                                      {DNNL_ARG_BIAS, plan.bias},
                                      {DNNL_ARG_DST, dst},
                                      {DNNL_ARG_SCRATCHPAD, scratchpad}});
      dnnl::reorder(dst, y_band).execute(stream, dst, y_band);
      stream.wait();
    } catch (const dnnl::error& e) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      failure = e.what();
    }
  });
  if (!failure.empty()) {
    return Status(StatusCode::kDeviceFailure, str_cat("oneDNN convolution failed: ", failure));
  }
  return Status::ok();
}

}  // namespace npuflow
