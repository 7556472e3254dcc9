// The tensor program's shape and layout ops: Shape, Size, Reshape, Unsqueeze, Squeeze, Flatten,
// Transpose, Expand, Concat, Slice, Gather, Tile, Range and ConstantOfShape, with the ONNX
// spec's rules for negative axes, clamped slice bounds and wrapped gather indices.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/strings.h"
#include "ops/program_kernels.h"

namespace npuflow::program {
namespace {

const std::set<std::string>& layout_ops() {
  static const std::set<std::string> ops = {
      "Shape",          "Size",    "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose",
      "Expand",         "Concat",  "Slice",   "Gather",    "Tile",    "Range",   "ConstantOfShape",
      "GatherElements", "GatherND"};
  return ops;
}

ProgramTensor int64_tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  ProgramTensor t(ElementType::kInt64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

// The same bytes under a new shape.
ProgramTensor reshaped(const TensorView& x, std::vector<int64_t> shape) {
  return ProgramTensor::copy_of(x.type, std::move(shape), x.data);
}

// Axes from the attribute (older opsets) or the second input (newer ones).
bool axes_of(const ProgramOp& op, const Inputs& in, std::vector<int64_t>& axes, bool& given) {
  given = false;
  if (const ProgramAttribute* a = op.attribute("axes"); a && a->integers) {
    axes = *a->integers;
    given = true;
    return true;
  }
  if (in.size() > 1 && in[1].shape != nullptr) {
    given = true;
    return read_integers(in[1], axes);
  }
  axes.clear();
  return true;
}

Status shape_op(const ProgramOp& op, const TensorView& x, Outputs& out) {
  const auto rank = static_cast<int64_t>(x.shape->size());
  int64_t start = op.int_attribute("start", 0), end = op.int_attribute("end", rank);
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  start = clamp(start);
  end = clamp(end);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back((*x.shape)[static_cast<size_t>(i)]);
  out.push_back(int64_tensor(dims, {static_cast<int64_t>(dims.size())}));
  return Status::ok();
}

Status reshape(const ProgramOp& op, const Inputs& in, Outputs& out) {
  std::vector<int64_t> target;
  if (in.size() < 2 || !read_integers(in[1], target)) return op_error(op, "takes an int shape");
  const bool allow_zero = op.int_attribute("allowzero", 0) != 0;
  const std::vector<int64_t>& s = *in[0].shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allow_zero) {
      if (i >= s.size()) return op_error(op, "copies a dimension the input lacks");
      target[i] = s[i];
    }
    if (target[i] == -1) {
      if (infer >= 0) return op_error(op, "has two -1 dimensions");
      infer = static_cast<int64_t>(i);
    } else if (target[i] < 0) {
      return op_error(op, "has a negative dimension");
    } else {
      known *= target[i];
    }
  }
  const int64_t count = in[0].count();
  if (infer >= 0) {
    if (known == 0 || count % known) return op_error(op, "cannot infer its -1 dimension");
    target[static_cast<size_t>(infer)] = count / known;
  } else if (known != count) {
    return op_error(op, str_cat("cannot reshape ", shape_string(s), " to ", shape_string(target)));
  }
  out.push_back(reshaped(in[0], target));
  return Status::ok();
}

Status unsqueeze(const ProgramOp& op, const Inputs& in, Outputs& out) {
  std::vector<int64_t> axes;
  bool given = false;
  if (!axes_of(op, in, axes, given) || !given) return op_error(op, "takes integer axes");
  const std::vector<int64_t>& s = *in[0].shape;
  const auto rank = static_cast<int64_t>(s.size() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    if (!normalize_axis(a, rank) || inserted[static_cast<size_t>(a)])
      return op_error(op, "has an axis out of range or repeated");
    inserted[static_cast<size_t>(a)] = true;
  }
  std::vector<int64_t> shape;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i)
    shape.push_back(inserted[static_cast<size_t>(i)] ? 1 : s[next++]);
  out.push_back(reshaped(in[0], shape));
  return Status::ok();
}

Status squeeze(const ProgramOp& op, const Inputs& in, Outputs& out) {
  std::vector<int64_t> axes;
  bool given = false;
  if (!axes_of(op, in, axes, given)) return op_error(op, "takes integer axes");
  const std::vector<int64_t>& s = *in[0].shape;
  const auto rank = static_cast<int64_t>(s.size());
  std::vector<bool> removed(s.size(), false);
  if (!given) {
    for (size_t i = 0; i < s.size(); ++i) removed[i] = s[i] == 1;
  }
  for (int64_t a : axes) {
    if (!normalize_axis(a, rank) || s[static_cast<size_t>(a)] != 1)
      return op_error(op, "squeezes an axis that is not of size 1");
    removed[static_cast<size_t>(a)] = true;
  }
  std::vector<int64_t> shape;
  for (size_t i = 0; i < s.size(); ++i)
    if (!removed[i]) shape.push_back(s[i]);
  out.push_back(reshaped(in[0], shape));
  return Status::ok();
}

Status flatten(const ProgramOp& op, const TensorView& x, Outputs& out) {
  const auto rank = static_cast<int64_t>(x.shape->size());
  int64_t axis = op.int_attribute("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) return op_error(op, "has an axis out of range");
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < rank; ++i)
    ((i < axis) ? rows : cols) *= (*x.shape)[static_cast<size_t>(i)];
  out.push_back(reshaped(x, {rows, cols}));
  return Status::ok();
}

// Copies x's elements into y where y's element at row-major index i reads x at source(i).
template <typename Source>
void gather_elements(const TensorView& x, ProgramTensor& y, Source source) {
  const size_t size = element_size(x.type);
  const auto* from = static_cast<const uint8_t*>(x.data);
  auto* to = static_cast<uint8_t*>(y.raw());
  const int64_t n = y.count();
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(to + static_cast<size_t>(i) * size, from + static_cast<size_t>(source(i)) * size,
                size);
}

// Element strides of a row-major shape.
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

// Calls visit(index) for every multi-index of `shape` in row-major order.
template <typename Visit>
void for_each_index(const std::vector<int64_t>& shape, Visit visit) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    visit(index);
    for (size_t axis = shape.size(); axis-- > 0;) {
      if (++index[axis] < shape[axis]) break;
      index[axis] = 0;
    }
  }
}

Status transpose(const ProgramOp& op, const TensorView& x, Outputs& out) {
  const std::vector<int64_t>& s = *x.shape;
  std::vector<int64_t> perm;
  if (const ProgramAttribute* a = op.attribute("perm"); a && a->integers) {
    perm = *a->integers;
  } else {
    for (size_t i = s.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  if (perm.size() != s.size()) return op_error(op, "has a perm of the wrong rank");
  std::vector<bool> seen(s.size(), false);
  std::vector<int64_t> shape;
  for (int64_t& p : perm) {
    if (!normalize_axis(p, static_cast<int64_t>(s.size())) || seen[static_cast<size_t>(p)])
      return op_error(op, "has an invalid perm");
    seen[static_cast<size_t>(p)] = true;
    shape.push_back(s[static_cast<size_t>(p)]);
  }
  const std::vector<int64_t> from = strides_of(s);
  ProgramTensor y(x.type, shape);
  std::vector<int64_t> sources;
  sources.reserve(static_cast<size_t>(y.count()));
  for_each_index(shape, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t i = 0; i < index.size(); ++i) at += index[i] * from[static_cast<size_t>(perm[i])];
    sources.push_back(at);
  });
  gather_elements(x, y, [&](int64_t i) { return sources[static_cast<size_t>(i)]; });
  out.push_back(std::move(y));
  return Status::ok();
}

Status broadcast_to(const ProgramOp& op, const TensorView& x, const std::vector<int64_t>& shape,
                    Outputs& out) {
  const std::vector<std::vector<int64_t>> strides = {broadcast_strides(*x.shape, shape)};
  ProgramTensor y(x.type, shape);
  std::vector<int64_t> sources;
  sources.reserve(static_cast<size_t>(y.count()));
  for_each_broadcast(shape, strides,
                     [&](const std::vector<int64_t>& o) { sources.push_back(o[0]); });
  gather_elements(x, y, [&](int64_t i) { return sources[static_cast<size_t>(i)]; });
  out.push_back(std::move(y));
  (void)op;
  return Status::ok();
}

Status expand(const ProgramOp& op, const Inputs& in, Outputs& out) {
  std::vector<int64_t> target;
  if (in.size() < 2 || !read_integers(in[1], target)) return op_error(op, "takes an int shape");
  for (int64_t d : target)
    if (d < 0) return op_error(op, "has a negative dimension");
  std::vector<int64_t> shape;
  if (!broadcast_shape({in[0].shape, &target}, shape)) {
    return op_error(
        op, str_cat("cannot expand ", shape_string(*in[0].shape), " to ", shape_string(target)));
  }
  return broadcast_to(op, in[0], shape, out);
}

Status tile(const ProgramOp& op, const Inputs& in, Outputs& out) {
  std::vector<int64_t> repeats;
  const std::vector<int64_t>& s = *in[0].shape;
  if (in.size() < 2 || !read_integers(in[1], repeats) || repeats.size() != s.size())
    return op_error(op, "takes one repeat per axis");
  std::vector<int64_t> shape;
  for (size_t i = 0; i < s.size(); ++i) {
    if (repeats[i] < 0) return op_error(op, "has a negative repeat");
    shape.push_back(s[i] * repeats[i]);
  }
  const std::vector<int64_t> from = strides_of(s);
  ProgramTensor y(in[0].type, shape);
  std::vector<int64_t> sources;
  for_each_index(shape, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t i = 0; i < index.size(); ++i) at += (index[i] % s[i]) * from[i];
    sources.push_back(at);
  });
  gather_elements(in[0], y, [&](int64_t i) { return sources[static_cast<size_t>(i)]; });
  out.push_back(std::move(y));
  return Status::ok();
}

Status concat(const ProgramOp& op, const Inputs& in, Outputs& out) {
  if (in.empty()) return op_error(op, "has no inputs");
  const std::vector<int64_t>& first = *in[0].shape;
  int64_t axis = op.int_attribute("axis", 0);
  if (!normalize_axis(axis, static_cast<int64_t>(first.size())))
    return op_error(op, "has an axis out of range");
  std::vector<int64_t> shape = first;
  shape[static_cast<size_t>(axis)] = 0;
  for (const TensorView& t : in) {
    if (t.type != in[0].type || t.shape->size() != first.size())
      return op_error(op, "joins tensors of different types or ranks");
    for (size_t i = 0; i < first.size(); ++i)
      if (static_cast<int64_t>(i) != axis && (*t.shape)[i] != first[i])
        return op_error(op, "joins tensors whose other dimensions differ");
    shape[static_cast<size_t>(axis)] += (*t.shape)[static_cast<size_t>(axis)];
  }
  ProgramTensor y(in[0].type, shape);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) inner *= shape[i];
  const size_t size = element_size(in[0].type);
  auto* to = static_cast<uint8_t*>(y.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (const TensorView& t : in) {
      const size_t chunk =
          static_cast<size_t>((*t.shape)[static_cast<size_t>(axis)] * inner) * size;
      if (chunk == 0) continue;  // an empty input may have no storage at all
      std::memcpy(to, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(o) * chunk, chunk);
      to += chunk;
    }
  out.push_back(std::move(y));
  return Status::ok();
}

Status slice(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const std::vector<int64_t>& s = *in[0].shape;
  const auto rank = static_cast<int64_t>(s.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (const ProgramAttribute* a = op.attribute("starts"); a && a->integers) {  // opset < 10
    starts = *a->integers;
    const ProgramAttribute* e = op.attribute("ends");
    if (!e || !e->integers) return op_error(op, "lacks ends");
    ends = *e->integers;
    if (const ProgramAttribute* x = op.attribute("axes"); x && x->integers) axes = *x->integers;
  } else {
    if (in.size() < 3 || !read_integers(in[1], starts) || !read_integers(in[2], ends))
      return op_error(op, "takes integer starts and ends");
    if (in.size() > 3 && in[3].shape && !read_integers(in[3], axes))
      return op_error(op, "takes integer axes");
    if (in.size() > 4 && in[4].shape && !read_integers(in[4], steps))
      return op_error(op, "takes integer steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return op_error(op, "has starts, ends, axes and steps of different lengths");
  // Bounds as the CPU EP computes them (its slice helper): a start made non-negative and clamped
  // to the axis ([0, dim - 1] stepping backward); an end of INT32_MAX or INT64_MAX meaning "to
  // the far end" (-1 stepping backward), any other made non-negative and clamped to [-1, dim]
  // backward or [0, dim] forward. The attribute form (before opset 10) has no steps.
  const bool attribute_form = op.attribute("starts") != nullptr;
  std::vector<int64_t> begin(s.size(), 0), step(s.size(), 1), shape = s;
  std::vector<bool> seen(s.size(), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = axes[i];
    if (!normalize_axis(axis, rank) || seen[static_cast<size_t>(axis)])
      return op_error(op, "has an axis out of range or repeated");
    seen[static_cast<size_t>(axis)] = true;
    const int64_t dim = s[static_cast<size_t>(axis)], st = steps[i];
    if (st == 0) return op_error(op, "has a step of 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    b = std::clamp(b, int64_t{0}, st < 0 ? dim - 1 : dim);
    int64_t count = 0;
    if (attribute_form) {
      if (e < 0) e += dim;
      count = std::max<int64_t>(std::clamp(e, int64_t{0}, dim) - b, 0);
    } else {
      if (e == std::numeric_limits<int32_t>::max() || e == std::numeric_limits<int64_t>::max()) {
        e = st < 0 ? -1 : dim;
      } else {
        if (e < 0) e += dim;
        e = std::clamp(e, st < 0 ? int64_t{-1} : int64_t{0}, dim);
      }
      const double n = std::ceil(static_cast<double>(e - b) / static_cast<double>(st));
      count = n > 0 ? static_cast<int64_t>(n) : 0;
    }
    if (dim == 0) count = 0;
    begin[static_cast<size_t>(axis)] = b;
    step[static_cast<size_t>(axis)] = st;
    shape[static_cast<size_t>(axis)] = count;
  }
  const std::vector<int64_t> from = strides_of(s);
  ProgramTensor y(in[0].type, shape);
  std::vector<int64_t> sources;
  for_each_index(shape, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t i = 0; i < index.size(); ++i) at += (begin[i] + index[i] * step[i]) * from[i];
    sources.push_back(at);
  });
  gather_elements(in[0], y, [&](int64_t i) { return sources[static_cast<size_t>(i)]; });
  out.push_back(std::move(y));
  return Status::ok();
}

Status gather(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const TensorView &x = in[0], &indices = in[1];
  const std::vector<int64_t>& s = *x.shape;
  int64_t axis = op.int_attribute("axis", 0);
  if (!normalize_axis(axis, static_cast<int64_t>(s.size())))
    return op_error(op, "has an axis out of range");
  std::vector<int64_t> idx;
  if (!read_integers(indices, idx)) return op_error(op, "takes integer indices");
  const int64_t dim = s[static_cast<size_t>(axis)];
  for (int64_t& i : idx) {
    if (i < -dim || i >= dim)
      return op_error(op, str_cat("index ", i, " is out of range for a dimension of ", dim));
    if (i < 0) i += dim;
  }
  std::vector<int64_t> shape(s.begin(), s.begin() + axis);
  shape.insert(shape.end(), indices.shape->begin(), indices.shape->end());
  shape.insert(shape.end(), s.begin() + axis + 1, s.end());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) inner *= s[i];
  ProgramTensor y(x.type, shape);
  const size_t row = static_cast<size_t>(inner) * element_size(x.type);
  const auto* from = static_cast<const uint8_t*>(x.data);
  auto* to = static_cast<uint8_t*>(y.raw());
  if (row == 0) outer = 0;  // nothing to copy, and an empty tensor may have no storage
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : idx) {
      std::memcpy(to, from + static_cast<size_t>(o * dim + i) * row, row);
      to += row;
    }
  out.push_back(std::move(y));
  return Status::ok();
}

Status gather_elements_op(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const TensorView &x = in[0], &indices = in[1];
  const std::vector<int64_t>& s = *x.shape;
  const std::vector<int64_t>& shape = *indices.shape;
  const auto rank = static_cast<int64_t>(s.size());
  int64_t axis = op.int_attribute("axis", 0);
  if (!normalize_axis(axis, rank) || static_cast<int64_t>(shape.size()) != rank)
    return op_error(op, "takes indices of the data's rank and an axis in range");
  for (size_t i = 0; i < s.size(); ++i)
    if (static_cast<int64_t>(i) != axis && shape[i] > s[i])
      return op_error(op, "has indices larger than the data off its axis");
  std::vector<int64_t> idx;
  if (!read_integers(indices, idx)) return op_error(op, "takes integer indices");
  const int64_t dim = s[static_cast<size_t>(axis)];
  const std::vector<int64_t> from = strides_of(s);
  std::vector<int64_t> sources;
  bool outside = false;
  size_t k = 0;
  for_each_index(shape, [&](const std::vector<int64_t>& index) {
    int64_t i = idx[k++];
    if (i < -dim || i >= dim) outside = true;
    if (i < 0) i += dim;
    int64_t at = 0;
    for (size_t a = 0; a < index.size(); ++a)
      at += (static_cast<int64_t>(a) == axis ? i : index[a]) * from[a];
    sources.push_back(outside ? 0 : at);
  });
  if (outside) return op_error(op, "has an index out of range");
  ProgramTensor y(x.type, shape);
  gather_elements(x, y, [&](int64_t i) { return sources[static_cast<size_t>(i)]; });
  out.push_back(std::move(y));
  return Status::ok();
}

Status gather_nd(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const TensorView &x = in[0], &indices = in[1];
  const std::vector<int64_t>& s = *x.shape;
  const std::vector<int64_t>& is = *indices.shape;
  const int64_t b = op.int_attribute("batch_dims", 0);
  if (is.empty() || b < 0 || b >= static_cast<int64_t>(is.size()) ||
      b >= static_cast<int64_t>(s.size()))
    return op_error(op, "has batch_dims out of range");
  const int64_t q = is.back();
  if (q < 1 || b + q > static_cast<int64_t>(s.size()))
    return op_error(op, "indexes more axes than the data has");
  for (int64_t i = 0; i < b; ++i)
    if (is[static_cast<size_t>(i)] != s[static_cast<size_t>(i)])
      return op_error(op, "has batch dimensions that differ");
  std::vector<int64_t> idx;
  if (!read_integers(indices, idx)) return op_error(op, "takes integer indices");
  // Output: indices' dims but the last, then the data's dims past the indexed ones.
  std::vector<int64_t> shape(is.begin(), is.end() - 1);
  int64_t slice = 1;
  for (size_t i = static_cast<size_t>(b + q); i < s.size(); ++i) {
    shape.push_back(s[i]);
    slice *= s[i];
  }
  int64_t batches = 1, per_batch = 1, batch_stride = 1;
  for (int64_t i = 0; i < b; ++i) batches *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(b); i + 1 < is.size(); ++i) per_batch *= is[i];
  for (size_t i = static_cast<size_t>(b); i < s.size(); ++i) batch_stride *= s[i];
  const std::vector<int64_t> from = strides_of(s);
  std::vector<int64_t> sources;
  for (int64_t batch = 0; batch < batches; ++batch)
    for (int64_t j = 0; j < per_batch; ++j) {
      const int64_t* tuple = idx.data() + (batch * per_batch + j) * q;
      int64_t at = batch * batch_stride;
      for (int64_t a = 0; a < q; ++a) {
        const int64_t dim = s[static_cast<size_t>(b + a)];
        int64_t i = tuple[a];
        if (i < -dim || i >= dim) return op_error(op, "has an index out of range");
        if (i < 0) i += dim;
        at += i * from[static_cast<size_t>(b + a)];
      }
      for (int64_t e = 0; e < slice; ++e) sources.push_back(at + e);
    }
  ProgramTensor y(x.type, shape);
  gather_elements(x, y, [&](int64_t i) { return sources[static_cast<size_t>(i)]; });
  out.push_back(std::move(y));
  return Status::ok();
}

Status range(const ProgramOp& op, const Inputs& in, Outputs& out) {
  if (in.size() != 3) return op_error(op, "takes start, limit and delta");
  for (const TensorView& t : in)
    if (t.count() != 1 || t.type != in[0].type)
      return op_error(op, "takes three scalars of one type");
  ProgramTensor y;
  bool bad = false;
  const bool ok = dispatch(in[0].type, [&](auto tag) {
    using T = decltype(tag);
    const T start = *in[0].as<T>(), limit = *in[1].as<T>(), delta = *in[2].as<T>();
    if (delta == T{0}) {
      bad = true;
      return;
    }
    const double n = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                               static_cast<double>(delta));
    const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
    y = ProgramTensor(in[0].type, {count});
    T value = start;
    for (int64_t i = 0; i < count; ++i) {
      y.data<T>()[i] = value;
      value = static_cast<T>(value + delta);
    }
  });
  if (!ok || in[0].type == ElementType::kBool) return op_error(op, "takes numbers");
  if (bad) return op_error(op, "has a delta of 0");
  out.push_back(std::move(y));
  return Status::ok();
}

Status constant_of_shape(const ProgramOp& op, const Inputs& in, Outputs& out) {
  std::vector<int64_t> shape;
  if (!read_integers(in[0], shape)) return op_error(op, "takes an int64 shape");
  for (int64_t d : shape)
    if (d < 0) return op_error(op, "has a negative dimension");
  const ProgramAttribute* a = op.attribute("value");
  if (a && a->tensor && a->tensor->count() != 1)
    return op_error(op, "has a value of many elements");
  const ElementType type = a && a->tensor ? a->tensor->type() : ElementType::kFloat32;
  ProgramTensor y(type, shape);
  const size_t size = element_size(type);
  auto* to = static_cast<uint8_t*>(y.raw());
  for (int64_t i = 0; i < y.count(); ++i) {
    if (a && a->tensor) std::memcpy(to + static_cast<size_t>(i) * size, a->tensor->raw(), size);
  }
  out.push_back(std::move(y));
  return Status::ok();
}

}  // namespace

bool is_layout(const std::string& op_type) {
  return layout_ops().count(op_type) > 0;
}

Status run_layout(const ProgramOp& op, const Inputs& in, Outputs& out) {
  const std::string& name = op.op_type;
  if (in.empty() || in[0].shape == nullptr) return op_error(op, "lacks its first input");
  if (name == "Shape") return shape_op(op, in[0], out);
  if (name == "Size") {
    out.push_back(int64_tensor({in[0].count()}, {}));
    return Status::ok();
  }
  if (name == "Reshape") return reshape(op, in, out);
  if (name == "Unsqueeze") return unsqueeze(op, in, out);
  if (name == "Squeeze") return squeeze(op, in, out);
  if (name == "Flatten") return flatten(op, in[0], out);
  if (name == "Transpose") return transpose(op, in[0], out);
  if (name == "Expand") return expand(op, in, out);
  if (name == "Tile") return tile(op, in, out);
  if (name == "Concat") return concat(op, in, out);
  if (name == "Slice") return slice(op, in, out);
  if (name == "Gather") {
    if (in.size() != 2 || in[1].shape == nullptr) return op_error(op, "takes data and indices");
    return gather(op, in, out);
  }
  if (name == "GatherElements" || name == "GatherND") {
    if (in.size() != 2 || in[1].shape == nullptr) return op_error(op, "takes data and indices");
    return name == "GatherND" ? gather_nd(op, in, out) : gather_elements_op(op, in, out);
  }
  if (name == "Range") return range(op, in, out);
  if (name == "ConstantOfShape") return constant_of_shape(op, in, out);
  return op_error(op, "is not a layout op");
}

}  // namespace npuflow::program
