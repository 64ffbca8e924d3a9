// arcal.cedar_attention: the CEDAR kernel (cedar/cedar.hpp) on numpy buffers, read in place when they
// are float32 and C-contiguous; the checks and messages of `arcal cedar`.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "cedar/cedar.hpp"
#include "convert.hpp"

namespace arcalpy {

namespace {

std::string shape_string(const py::array& a) {
  std::string r = "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) r += (i ? ", " : "") + std::to_string(a.shape(i));
  return r + "]";
}

py::tuple cedar_attention(py::object q_in, py::object k_in, py::object v_in, const std::string& method,
                          std::int64_t chunk_size, std::int64_t budget, py::object error_target, bool causal,
                          py::object chunk_starts, std::int64_t sink_chunks, int threads) {
  using namespace arcal::cedar;
  const std::string ctx = "arcal.cedar_attention";
  const char* names[3] = {"q", "k", "v"};
  py::handle inputs[3] = {q_in, k_in, v_in};
  py::array a[3];
  for (int i = 0; i < 3; ++i) {
    py::array raw = as_array(inputs[i], ctx, names[i]);
    const char kind = raw.dtype().attr("kind").cast<std::string>()[0];
    if (kind != 'f')
      value_error(ctx, std::string("array '") + names[i] + "' has dtype " + py::str(raw.dtype()).cast<std::string>() +
                           ", but must be float32 (other floats are converted)");
    if (raw.ndim() != 2 && raw.ndim() != 3)
      value_error(ctx, std::string("array '") + names[i] + "' has shape " + shape_string(raw) + ", but must be [H, " +
                           (i ? "N" : "Nq") + ", d] or [" + (i ? "N" : "Nq") + ", d]");
    a[i] = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(raw);
    // Read without the GIL: a private copy, never the caller's buffer that another thread may write.
    if (a[i].ptr() == raw.ptr()) a[i] = py::array_t<float>(a[i].attr("copy")());
  }
  if (a[0].ndim() != a[1].ndim() || a[1].ndim() != a[2].ndim())
    value_error(ctx, "q, k and v must all be 3-D [H, tokens, d] or all 2-D [tokens, d]; got " + shape_string(a[0]) +
                         ", " + shape_string(a[1]) + ", " + shape_string(a[2]));
  const bool two_d = a[0].ndim() == 2;
  auto dim = [&](int i, int axis) -> std::int64_t {
    return two_d ? (axis == 0 ? 1 : a[i].shape(axis - 1)) : a[i].shape(axis);
  };
  for (int axis = 0; axis < 3; ++axis)
    if (dim(1, axis) != dim(2, axis))
      value_error(ctx, "k has shape " + shape_string(a[1]) + " but v has " + shape_string(a[2]) + "; they must match");
  if (dim(0, 0) != dim(1, 0))
    value_error(ctx, "q has " + std::to_string(dim(0, 0)) + " heads but k has " + std::to_string(dim(1, 0)));
  if (dim(0, 2) != dim(1, 2))
    value_error(ctx,
                "q has head width d = " + std::to_string(dim(0, 2)) + " but k has d = " + std::to_string(dim(1, 2)));
  const Shape shape{dim(0, 0), dim(0, 1), dim(1, 1), dim(0, 2)};
  Options opt;
  opt.method = parse_method(method);
  opt.budget = budget;
  opt.causal = causal;
  opt.sink_chunks = sink_chunks;
  opt.threads = threads;
  if (!error_target.is_none()) opt.error_target = error_target.cast<double>();
  if (threads < 0) value_error(ctx, "threads is " + std::to_string(threads) + ", but must be >= 0 (0 = all cores)");
  std::vector<std::int64_t> starts;
  const bool has_starts = !chunk_starts.is_none();
  if (has_starts) {
    py::array s = as_array(chunk_starts, ctx, "chunk_starts");
    const char kind = s.dtype().attr("kind").cast<std::string>()[0];
    if (s.ndim() != 1) value_error(ctx, "array 'chunk_starts' has shape " + shape_string(s) + ", but must be 1-D [M]");
    if (kind != 'i' && kind != 'u')
      value_error(ctx, "array 'chunk_starts' has dtype " + py::str(s.dtype()).cast<std::string>() +
                           ", but must be int64 (any integer type accepted)");
    starts = s.cast<std::vector<std::int64_t>>();
  }
  const auto* q = static_cast<const float*>(a[0].data());
  const auto* k = static_cast<const float*>(a[1].data());
  const auto* v = static_cast<const float*>(a[2].data());
  std::vector<py::ssize_t> out_shape, exp_shape;
  if (two_d) {
    out_shape = {shape.n_queries, shape.dim};
    exp_shape = {shape.n_queries};
  } else {
    out_shape = {shape.heads, shape.n_queries, shape.dim};
    exp_shape = {shape.heads, shape.n_queries};
  }
  py::array_t<float> out(out_shape);
  py::array_t<std::int32_t> expanded(exp_shape);
  float* o = out.mutable_data();
  std::int32_t* e = expanded.mutable_data();
  {
    py::gil_scoped_release release;
    check_inputs(q, k, v, shape, ctx);
    const ChunkLayout chunks = has_starts ? chunks_from_starts(starts, shape.n_keys, ctx + ": chunk_starts")
                                          : fixed_chunks(shape.n_keys, chunk_size);
    check_options(opt, shape, chunks);
    attention(q, k, v, shape, chunks, opt, o, e);
  }
  return py::make_tuple(out, expanded);
}

}  // namespace

void bind_cedar(py::module_& m) {
  using namespace pybind11::literals;
  m.def("cedar_attention", &cedar_attention, "q"_a, "k"_a, "v"_a, py::kw_only(), "method"_a = "cedar",
        "chunk_size"_a = 64, "budget"_a = 8, "error_target"_a = py::none(), "causal"_a = false,
        "chunk_starts"_a = py::none(), "sink_chunks"_a = 0, "threads"_a = 0,
        R"doc(Coarse-to-fine attention (CEDAR, docs/method.md §8), as `arcal cedar` computes it.

Parameters
----------
q : [H, Nq, d] or [Nq, d]; k, v : [H, N, d] or [N, d] (all 3-D or all 2-D). float32 C-contiguous
    arrays are read in place; other float dtypes are converted to float32.
method : "cedar" (bound-ranked chunk expansion), "topk" (hard top-k chunks), "summary" (B = 0) or
    "dense" (exact softmax(q kᵀ/√d) v).
chunk_size : keys per chunk (64; ignored when chunk_starts is given). chunk_starts : [M] chunk starts.
budget : cap B on the chunks expanded to exact attention per query (8).
error_target : cedar only: stop expanding once the error bound is below error_target · |o_0| (None: off).
causal : queries are the last Nq key positions and see keys at positions <= their own.
sink_chunks : the first S chunks are always exact. threads : workers (0 = all cores; results do not
    depend on it).

Returns
-------
(out, expanded): out float32 with q's shape; expanded int32 [H, Nq] (or [Nq]): the exact chunks each
query used. Non-finite inputs raise ValueError naming the element. Runs without the GIL.)doc");
}

}  // namespace arcalpy
