// arcal._arcal._softmax_topk_summaries: the top-k output form's per-token summaries (src/ops/topk_summary.hpp)
// for the Python recorder (arcal.torch_hooks), read in place from float32 logits on the CPU.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "ops/topk_summary.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace arcalpy {

namespace {

/// The arrays are read where they are, with the GIL held for the call: they are the recorder's view of
/// the model's own logits, not the caller's to change meanwhile, and a copy of [rows, K] would cost what
/// the kernel saves (the kernel reads each row twice, from cache).
py::tuple softmax_topk_summaries(const py::array& logits, std::size_t k, const py::object& rows, int threads) {
  const std::string fn = "arcal._softmax_topk_summaries";
  if (!py::isinstance<py::array_t<float>>(logits) || logits.ndim() != 2)
    throw py::value_error(fn + ": logits must be a 2-D float32 array");
  const auto K = std::size_t(logits.shape(1)), R = std::size_t(logits.shape(0));
  if (logits.strides(1) != py::ssize_t(sizeof(float)) || logits.strides(0) < 0 ||
      std::size_t(logits.strides(0)) % sizeof(float) != 0)
    throw py::value_error(fn + ": logits' rows must be contiguous float32 (stride 4 along a row)");
  if (k < 1 || k > K)
    throw py::value_error(fn + ": k is " + std::to_string(k) + ", but must be in [1, " + std::to_string(K) + "]");
  const std::size_t stride = std::size_t(logits.strides(0)) / sizeof(float);
  const auto* z = static_cast<const float*>(logits.data());
  py::array_t<std::int64_t, py::array::c_style> index;
  std::size_t n = R;
  if (!rows.is_none()) {
    index = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>(rows);
    if (index.ndim() != 1) throw py::value_error(fn + ": rows must be 1-D");
    n = std::size_t(index.shape(0));
    for (std::size_t j = 0; j < n; ++j)
      if (index.data()[j] < 0 || std::size_t(index.data()[j]) >= R)
        throw py::value_error(fn + ": rows[" + std::to_string(j) + "] is " + std::to_string(index.data()[j]) +
                              ", but must be in [0, " + std::to_string(R) + ")");
  }
  py::array_t<float> top({n, k});
  py::array_t<std::int64_t> idx({n, k});
  const auto len = py::ssize_t(n);
  py::array_t<float> lz{len}, ent{len}, sq{len};
  arcal::TopkSummaryOutput out{top.mutable_data(), idx.mutable_data(), lz.mutable_data(), ent.mutable_data(),
                               sq.mutable_data()};
  arcal::softmax_topk_summaries(z, K, stride, rows.is_none() ? nullptr : index.data(), n, k, out, threads);
  return py::make_tuple(top, idx, lz, ent, sq);
}

}  // namespace

void bind_recording(py::module_& m) {
  m.def("_softmax_topk_summaries", &softmax_topk_summaries, "logits"_a, "k"_a, "rows"_a = py::none(), "threads"_a = 1,
        "Internal (arcal.torch_hooks): (topk_logprobs [R, k], topk_indices, log_normalizer, predictive_entropy, "
        "prob_sq_sum [R]) of float32 logits [N, K] (rows contiguous) at `rows` (int64 [R]; None: every row).");
}

}  // namespace arcalpy
