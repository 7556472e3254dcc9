// The tensor program's elementwise ops: arithmetic, comparisons, logic, Where, Cast, CumSum and
// MatMul. Integer arithmetic wraps as two's complement (as the CPU EP's kernels do on every
// machine it runs on); float arithmetic is IEEE fp32, one rounding per op.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <type_traits>

#include "core/strings.h"
#include "ops/program_kernels.h"

namespace npuflow::program {
namespace {

const std::set<std::string>& unary_ops() {
  static const std::set<std::string> ops = {"Neg",   "Abs",   "Sqrt",  "Reciprocal", "Exp",   "Log",
                                            "Cos",   "Sin",   "Floor", "Ceil",       "Round", "Not",
                                            "IsNaN", "IsInf", "Sign",  "Identity"};
  return ops;
}
const std::set<std::string>& binary_ops() {
  static const std::set<std::string> ops = {
      "Add",   "Sub",  "Mul",         "Div",     "Pow",
      "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
      "And",   "Or",   "Xor",         "Max",     "Min"};
  return ops;
}

template <typename T>
constexpr bool kIsFloat = std::is_same_v<T, float>;

// Two's complement wrap for + - * on signed integers (no undefined behaviour).
template <typename T>
T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

// Float to integer as this CPU's truncating conversion does it (the CPU EP's Cast is a plain
// C++ conversion): on x86 NaN and values out of range give the "integer indefinite" value, the
// most negative one; on Arm (fcvtzs) they saturate and NaN gives 0.
template <typename To>
To float_to_int(float x) {
  constexpr auto lo = static_cast<float>(std::numeric_limits<To>::min());
  if (x >= lo && x < -lo) return static_cast<To>(x);
#if defined(__aarch64__)
  if (std::isnan(x)) return To{0};
  return x < 0 ? std::numeric_limits<To>::min() : std::numeric_limits<To>::max();
#else
  return std::numeric_limits<To>::min();
#endif
}

template <typename To, typename From>
To convert(From x) {
  if constexpr (std::is_same_v<To, uint8_t>) {  // to bool
    return x != From{0} ? 1 : 0;
  } else if constexpr (std::is_same_v<From, uint8_t>) {  // from bool
    return static_cast<To>(x != 0 ? 1 : 0);
  } else if constexpr (kIsFloat<From> && !kIsFloat<To>) {
    return float_to_int<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

Status unary(const ProgramOp& op, const TensorView& x, Outputs& out) {
  const std::string& name = op.op_type;
  const int64_t n = x.count();
  if (name == "Identity") {
    out.push_back(ProgramTensor::copy_of(x.type, *x.shape, x.data));
    return Status::ok();
  }
  if (name == "Not") {
    if (x.type != ElementType::kBool) return op_error(op, "takes bool");
    ProgramTensor y(ElementType::kBool, *x.shape);
    for (int64_t i = 0; i < n; ++i) y.data<uint8_t>()[i] = x.as<uint8_t>()[i] ? 0 : 1;
    out.push_back(std::move(y));
    return Status::ok();
  }
  if (name == "IsNaN" || name == "IsInf") {
    if (x.type != ElementType::kFloat32) return op_error(op, "takes float");
    const bool negative = op.int_attribute("detect_negative", 1) != 0;
    const bool positive = op.int_attribute("detect_positive", 1) != 0;
    ProgramTensor y(ElementType::kBool, *x.shape);
    for (int64_t i = 0; i < n; ++i) {
      const float v = x.as<float>()[i];
      bool r = std::isnan(v);
      if (name == "IsInf") r = std::isinf(v) && (v > 0 ? positive : negative);
      y.data<uint8_t>()[i] = r ? 1 : 0;
    }
    out.push_back(std::move(y));
    return Status::ok();
  }
  const bool float_only = name == "Sqrt" || name == "Reciprocal" || name == "Exp" ||
                          name == "Log" || name == "Cos" || name == "Sin" || name == "Floor" ||
                          name == "Ceil" || name == "Round";
  if (x.type == ElementType::kBool || (float_only && x.type != ElementType::kFloat32))
    return op_error(op, str_cat("does not take ", element_type_name(x.type)));
  ProgramTensor y(x.type, *x.shape);
  dispatch(x.type, [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.as<T>();
    T* r = y.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kIsFloat<T>) {
        const float v = a[i];
        if (name == "Neg")
          r[i] = -v;
        else if (name == "Abs")
          r[i] = std::fabs(v);
        else if (name == "Sqrt")
          r[i] = std::sqrt(v);
        else if (name == "Reciprocal")
          r[i] = 1.0f / v;
        else if (name == "Exp")
          r[i] = std::exp(v);
        else if (name == "Log")
          r[i] = std::log(v);
        else if (name == "Cos")
          r[i] = std::cos(v);
        else if (name == "Sin")
          r[i] = std::sin(v);
        else if (name == "Floor")
          r[i] = std::floor(v);
        else if (name == "Ceil")
          r[i] = std::ceil(v);
        else if (name == "Round")
          r[i] = std::nearbyint(v);  // half to even
        else if (name == "Sign")
          r[i] = std::isnan(v) ? v : static_cast<float>((v > 0) - (v < 0));
      } else if constexpr (!std::is_same_v<T, uint8_t>) {
        const T v = a[i];
        if (name == "Neg")
          r[i] = wrap_sub(T{0}, v);
        else if (name == "Abs")
          r[i] = v < 0 ? wrap_sub(T{0}, v) : v;
        else if (name == "Sign")
          r[i] = static_cast<T>((v > 0) - (v < 0));
      }
    }
  });
  out.push_back(std::move(y));
  return Status::ok();
}

bool is_comparison(const std::string& name) {
  return name == "Equal" || name == "Less" || name == "LessOrEqual" || name == "Greater" ||
         name == "GreaterOrEqual";
}
bool is_logical(const std::string& name) {
  return name == "And" || name == "Or" || name == "Xor";
}

Status binary(const ProgramOp& op, const TensorView& a, const TensorView& b, Outputs& out) {
  const std::string& name = op.op_type;
  if (a.type != b.type && name != "Pow")
    return op_error(
        op, str_cat("mixes ", element_type_name(a.type), " and ", element_type_name(b.type)));
  if (is_logical(name) != (a.type == ElementType::kBool) && !(name == "Equal"))
    return op_error(op, str_cat("does not take ", element_type_name(a.type)));
  if (name == "Pow" && a.type != ElementType::kFloat32) return op_error(op, "takes a float base");
  std::vector<int64_t> shape;
  if (!broadcast_shape({a.shape, b.shape}, shape)) {
    return op_error(
        op, str_cat("cannot broadcast ", shape_string(*a.shape), " with ", shape_string(*b.shape)));
  }
  const std::vector<std::vector<int64_t>> strides = {broadcast_strides(*a.shape, shape),
                                                     broadcast_strides(*b.shape, shape)};
  const bool to_bool = is_comparison(name) || is_logical(name);
  ProgramTensor y(to_bool ? ElementType::kBool : a.type, shape);
  bool divided_by_zero = false;
  if (name == "Pow") {  // float base; the exponent may be float or integer
    std::vector<float> exponent(static_cast<size_t>(b.count()));
    const bool ok = dispatch(b.type, [&](auto tag) {
      using T = decltype(tag);
      for (size_t i = 0; i < exponent.size(); ++i) exponent[i] = static_cast<float>(b.as<T>()[i]);
    });
    if (!ok || b.type == ElementType::kBool) return op_error(op, "takes a numeric exponent");
    float* r = y.data<float>();
    int64_t k = 0;
    for_each_broadcast(shape, strides, [&](const std::vector<int64_t>& o) {
      const float base = a.as<float>()[o[0]], e = exponent[static_cast<size_t>(o[1])];
      r[k++] = e == 2.0f ? base * base : std::pow(base, e);
    });
    out.push_back(std::move(y));
    return Status::ok();
  }
  dispatch(a.type, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.as<T>();
    const T* z = b.as<T>();
    int64_t k = 0;
    if (to_bool) {
      uint8_t* r = y.data<uint8_t>();
      for_each_broadcast(shape, strides, [&](const std::vector<int64_t>& o) {
        const T p = x[o[0]], q = z[o[1]];
        bool v = false;
        if (name == "Equal")
          v = p == q;
        else if (name == "Less")
          v = p < q;
        else if (name == "LessOrEqual")
          v = p <= q;
        else if (name == "Greater")
          v = p > q;
        else if (name == "GreaterOrEqual")
          v = p >= q;
        else if (name == "And")
          v = p && q;
        else if (name == "Or")
          v = p || q;
        else if (name == "Xor")
          v = (p != 0) != (q != 0);
        r[k++] = v ? 1 : 0;
      });
      return;
    }
    T* r = y.data<T>();
    for_each_broadcast(shape, strides, [&](const std::vector<int64_t>& o) {
      const T p = x[o[0]], q = z[o[1]];
      T v{};
      if constexpr (kIsFloat<T>) {
        if (name == "Add")
          v = p + q;
        else if (name == "Sub")
          v = p - q;
        else if (name == "Mul")
          v = p * q;
        else if (name == "Div")
          v = p / q;
        // NaN propagates; between equals (0 and -0) the later operand wins, as in the CPU EP.
        else if (name == "Max")
          v = std::isnan(p) || std::isnan(q) ? std::nanf("") : p > q ? p : q;
        else if (name == "Min")
          v = std::isnan(p) || std::isnan(q) ? std::nanf("") : p < q ? p : q;
      } else {
        if (name == "Add")
          v = wrap_add(p, q);
        else if (name == "Sub")
          v = wrap_sub(p, q);
        else if (name == "Mul")
          v = wrap_mul(p, q);
        else if (name == "Div") {
          // Truncating division; the one overflowing quotient wraps.
          if (q == 0)
            divided_by_zero = true;
          else if (q == static_cast<T>(-1))
            v = wrap_sub(T{0}, p);
          else
            v = static_cast<T>(p / q);
        } else if (name == "Max")
          v = std::max(p, q);
        else if (name == "Min")
          v = std::min(p, q);
      }
      r[k++] = v;
    });
  });
  if (divided_by_zero) return op_error(op, "divides an integer by zero");
  out.push_back(std::move(y));
  return Status::ok();
}

Status where(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const TensorView &c = in[0], &x = in[1], &z = in[2];
  if (c.type != ElementType::kBool) return op_error(op, "takes a bool condition");
  if (x.type != z.type) return op_error(op, "mixes types");
  std::vector<int64_t> shape;
  if (!broadcast_shape({c.shape, x.shape, z.shape}, shape)) return op_error(op, "cannot broadcast");
  const std::vector<std::vector<int64_t>> strides = {broadcast_strides(*c.shape, shape),
                                                     broadcast_strides(*x.shape, shape),
                                                     broadcast_strides(*z.shape, shape)};
  ProgramTensor y(x.type, shape);
  dispatch(x.type, [&](auto tag) {
    using T = decltype(tag);
    T* r = y.data<T>();
    int64_t k = 0;
    // The CPU EP merges cond ? X : 0 with !cond ? Y : 0 by "the first unless it is 0", so an
    // X of -0 comes out +0: the same here, bit for bit.
    for_each_broadcast(shape, strides, [&](const std::vector<int64_t>& o) {
      const T picked = x.as<T>()[o[1]];
      r[k++] = c.as<uint8_t>()[o[0]] ? (picked == T{} ? T{} : picked) : z.as<T>()[o[2]];
    });
  });
  out.push_back(std::move(y));
  return Status::ok();
}

// ONNX TensorProto data types the program casts to.
std::optional<ElementType> cast_target(int64_t onnx_type) {
  switch (onnx_type) {
    case 1:
      return ElementType::kFloat32;
    case 6:
      return ElementType::kInt32;
    case 7:
      return ElementType::kInt64;
    case 9:
      return ElementType::kBool;
    default:
      return std::nullopt;
  }
}

Status cast(const ProgramOp& op, const TensorView& x, Outputs& out) {
  const auto to = cast_target(op.int_attribute("to", 0));
  if (!to) return op_error(op, "casts to a type the program does not compute on");
  ProgramTensor y(*to, *x.shape);
  const int64_t n = x.count();
  dispatch(x.type, [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch(*to, [&](auto to_tag) {
      using To = decltype(to_tag);
      for (int64_t i = 0; i < n; ++i) y.data<To>()[i] = convert<To, From>(x.as<From>()[i]);
    });
  });
  out.push_back(std::move(y));
  return Status::ok();
}

Status variadic_max_min(const ProgramOp& op, const Inputs& in, Outputs& out) {
  if (in.empty()) return op_error(op, "has no inputs");
  Outputs acc;
  acc.push_back(ProgramTensor::copy_of(in[0].type, *in[0].shape, in[0].data));
  for (size_t i = 1; i < in.size(); ++i) {
    Outputs next;
    NPUFLOW_RETURN_IF_ERROR(binary(op, view_of(acc[0]), in[i], next));
    acc = std::move(next);
  }
  out.push_back(std::move(acc[0]));
  return Status::ok();
}

Status cumsum(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const TensorView& x = in[0];
  std::vector<int64_t> axis_values;
  if (in.size() < 2 || !read_integers(in[1], axis_values) || axis_values.size() != 1)
    return op_error(op, "takes one integer axis");
  int64_t axis = axis_values[0];
  const auto rank = static_cast<int64_t>(x.shape->size());
  if (!normalize_axis(axis, rank)) return op_error(op, "has an axis out of range");
  const bool exclusive = op.int_attribute("exclusive", 0) != 0;
  const bool reverse = op.int_attribute("reverse", 0) != 0;
  if (x.type == ElementType::kBool) return op_error(op, "does not take bool");
  const std::vector<int64_t>& s = *x.shape;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<size_t>(i)];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= s[static_cast<size_t>(i)];
  const int64_t len = s[static_cast<size_t>(axis)];
  ProgramTensor y(x.type, s);
  dispatch(x.type, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        T sum{};
        for (int64_t step = 0; step < len; ++step) {
          const int64_t a = reverse ? len - 1 - step : step;
          const int64_t at = (o * len + a) * inner + j;
          const T v = x.as<T>()[at];
          if (exclusive) y.data<T>()[at] = sum;
          // The inclusive sum starts as the first element itself (so -0 stays -0), the
          // exclusive one from +0, as the CPU EP's kernel does.
          if (step == 0 && !exclusive)
            sum = v;
          else if constexpr (kIsFloat<T>)
            sum = sum + v;
          else
            sum = wrap_add(sum, v);
          if (!exclusive) y.data<T>()[at] = sum;
        }
      }
  });
  out.push_back(std::move(y));
  return Status::ok();
}

// MatMul in fp32 with numpy batch broadcasting; the sum runs over k in order (the graph-level
// code admits only a contraction of one, which makes it exact).
Status matmul(const ProgramOp& op, const TensorView& a, const TensorView& b, Outputs& out) {
  if (a.type != ElementType::kFloat32 || b.type != ElementType::kFloat32)
    return op_error(op, "takes float");
  std::vector<int64_t> sa = *a.shape, sb = *b.shape;
  if (sa.empty() || sb.empty()) return op_error(op, "takes no scalars");
  const bool vec_a = sa.size() == 1, vec_b = sb.size() == 1;
  if (vec_a) sa.insert(sa.begin(), 1);
  if (vec_b) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  if (sb[sb.size() - 2] != k) return op_error(op, "has mismatched inner dimensions");
  const std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  std::vector<int64_t> batch;
  if (!broadcast_shape({&ba, &bb}, batch)) return op_error(op, "cannot broadcast its batches");
  std::vector<int64_t> shape = batch;
  if (!vec_a) shape.push_back(m);
  if (!vec_b) shape.push_back(n);
  ProgramTensor y(ElementType::kFloat32, shape);
  const std::vector<std::vector<int64_t>> strides = {broadcast_strides(ba, batch),
                                                     broadcast_strides(bb, batch)};
  float* r = y.data<float>();
  int64_t at = 0;
  auto one_batch = [&](const std::vector<int64_t>& o) {
    const float* pa = a.as<float>() + o[0] * m * k;
    const float* pb = b.as<float>() + o[1] * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (int64_t t = 0; t < k; ++t) sum += pa[i * k + t] * pb[t * n + j];
        r[at++] = k == 0 ? 0.0f : sum;
      }
  };
  if (batch.empty())
    one_batch({0, 0});
  else
    for_each_broadcast(batch, strides, one_batch);
  out.push_back(std::move(y));
  return Status::ok();
}

}  // namespace

bool is_elementwise(const std::string& op_type) {
  return unary_ops().count(op_type) || binary_ops().count(op_type) || op_type == "Where" ||
         op_type == "Cast" || op_type == "CumSum" || op_type == "MatMul";
}

Status run_elementwise(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const std::string& name = op.op_type;
  for (const TensorView& t : in)
    if (t.shape == nullptr && name != "Max" && name != "Min") return op_error(op, "lacks an input");
  if (unary_ops().count(name)) {
    if (in.size() != 1) return op_error(op, "takes one input");
    return unary(op, in[0], out);
  }
  if (name == "Max" || name == "Min") return variadic_max_min(op, in, out);
  if (binary_ops().count(name)) {
    if (in.size() != 2) return op_error(op, "takes two inputs");
    return binary(op, in[0], in[1], out);
  }
  if (name == "Where") {
    if (in.size() != 3) return op_error(op, "takes three inputs");
    return where(op, in, out);
  }
  if (name == "Cast") {
    if (in.size() != 1) return op_error(op, "takes one input");
    return cast(op, in[0], out);
  }
  if (name == "CumSum") return cumsum(op, in, out);
  if (name == "MatMul") {
    if (in.size() != 2) return op_error(op, "takes two inputs");
    return matmul(op, in[0], in[1], out);
  }
  return op_error(op, "is not an elementwise op");
}

}  // namespace npuflow::program
