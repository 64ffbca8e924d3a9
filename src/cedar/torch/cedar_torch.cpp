#include "cedar/torch/cedar_torch.hpp"

#include "core/check.hpp"

namespace arcal::cedar {

std::pair<torch::Tensor, torch::Tensor> attention_tensors(const torch::Tensor& q, const torch::Tensor& k,
                                                          const torch::Tensor& v, const ChunkLayout& chunks,
                                                          const Options& options, Stats* stats) {
  const std::string f = "cedar attention";
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim())
    throw_input(f, "q, k and v must have the same number of dimensions (at least 2: [..., tokens, d])");
  if (!k.sizes().equals(v.sizes())) throw_input(f, "k and v must have the same shape");
  const auto nd = q.dim();
  for (std::int64_t i = 0; i < nd - 2; ++i)
    if (q.size(i) != k.size(i)) throw_input(f, "q and k must have the same leading dimensions");
  if (q.size(nd - 1) != k.size(nd - 1)) throw_input(f, "q and k must have the same head width d");
  const auto qf = q.detach().to(torch::kCPU, torch::kFloat).contiguous();
  const auto kf = k.detach().to(torch::kCPU, torch::kFloat).contiguous();
  const auto vf = v.detach().to(torch::kCPU, torch::kFloat).contiguous();
  Shape shape;
  shape.n_queries = q.size(nd - 2);
  shape.n_keys = k.size(nd - 2);
  shape.dim = q.size(nd - 1);
  shape.heads = shape.n_queries > 0 ? qf.numel() / (shape.n_queries * shape.dim) : 0;
  auto out = torch::empty(qf.sizes(), torch::kFloat);
  auto expanded = torch::empty(qf.sizes().slice(0, std::size_t(nd - 1)), torch::kInt);
  const Stats st = attention(qf.data_ptr<float>(), kf.data_ptr<float>(), vf.data_ptr<float>(), shape, chunks, options,
                             out.data_ptr<float>(), expanded.data_ptr<std::int32_t>());
  if (stats) *stats = st;
  return {out.to(q.scalar_type()), expanded};
}

namespace {

torch::Tensor backend_call(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                           const ChunkLayout& chunks, Options options, ExpansionTally* tally) {
  options.causal = options.causal || causal;
  Stats st;
  auto [out, expanded] = attention_tensors(q, k, v, chunks, options, &st);
  if (tally) {
    const double n = double(expanded.numel());
    tally->expanded += st.mean_expanded * n;
    tally->queries += n;
    tally->seconds += st.kernel_seconds + st.summary_seconds;
  }
  return out;
}

}  // namespace

AttentionBackend make_backend(ChunkLayout chunks, Options options, std::shared_ptr<ExpansionTally> tally) {
  return [chunks = std::move(chunks), options, tally](const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, bool causal) {
    return backend_call(q, k, v, causal, chunks, options, tally.get());
  };
}

AttentionBackend make_backend_fixed(std::int64_t chunk_size, Options options, std::shared_ptr<ExpansionTally> tally) {
  if (chunk_size < 1) throw_input("cedar backend", "chunk size " + std::to_string(chunk_size) + " must be >= 1");
  return [chunk_size, options, tally](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      bool causal) {
    return backend_call(q, k, v, causal, fixed_chunks(k.size(-2), chunk_size), options, tally.get());
  };
}

}  // namespace arcal::cedar
