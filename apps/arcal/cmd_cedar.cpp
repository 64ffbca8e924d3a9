// `arcal cedar --qkv F.npz ...`: coarse-to-fine attention (method.md §8) of one q/k/v file (the CEDAR
// kernel alone, no LibTorch: part of the `arcal` executable). `arcal cedar-study` is
// cmd_cedar_study.cpp. The library computes, this file reads, writes and prints.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cedar/cedar.hpp"
#include "cedar/clustered_study.hpp"
#include "command.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "option_binding.hpp"
#include "io/npz.hpp"

namespace {

namespace fs = std::filesystem;
using namespace arcal::cedar;

struct CedarConfig {
  std::string qkv, out, method = "cedar";
  std::int64_t chunk_size = 64, budget = 8, sink_chunks = 0;
  double error_target = 0;
  bool causal = false, json = false, vs_dense = false, force = false;
  int threads = 0;
};

std::string shape_string(const std::vector<std::size_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// q, k, v as float32 [H, rows, d] (2-D arrays mean H = 1), validated against each other.
struct QkvFile {
  Shape shape;
  std::vector<float> q, k, v;
  std::vector<std::int64_t> chunk_starts;
  bool has_chunk_starts = false;
};

QkvFile read_qkv(const std::string& path) {
  const std::string ctx = "arcal cedar: " + path;
  std::map<std::string, arcal::NpyArray> arrays;
  for (auto& a : arcal::read_npz(path)) arrays.emplace(a.name, std::move(a));
  QkvFile f;
  std::vector<std::size_t> shapes[3];
  const char* names[3] = {"q", "k", "v"};
  std::vector<float>* dst[3] = {&f.q, &f.k, &f.v};
  for (int i = 0; i < 3; ++i) {
    auto it = arrays.find(names[i]);
    if (it == arrays.end())
      arcal::throw_input(ctx, std::string("array '") + names[i] + "' is missing (the file needs q, k and v)");
    const arcal::NpyArray& a = it->second;
    if (a.dtype != arcal::DType::f4 && a.dtype != arcal::DType::f8)
      arcal::throw_input(ctx, std::string("array '") + names[i] + "' has dtype " + arcal::dtype_descr(a.dtype) +
                                  ", but must be float32 (<f4; float64 is converted)");
    if (a.ndim() != 2 && a.ndim() != 3)
      arcal::throw_input(ctx, std::string("array '") + names[i] + "' has shape " + shape_string(a.shape) +
                                  ", but must be [H, " + (i ? "N" : "Nq") + ", d] or [" + (i ? "N" : "Nq") + ", d]");
    shapes[i] = a.ndim() == 3 ? a.shape : std::vector<std::size_t>{1, a.shape[0], a.shape[1]};
    *dst[i] = a.as_float(ctx);
  }
  if (arrays.at("q").ndim() != arrays.at("k").ndim() || arrays.at("k").ndim() != arrays.at("v").ndim())
    arcal::throw_input(ctx, "q, k and v must all be 3-D [H, tokens, d] or all 2-D [tokens, d]; got " +
                                shape_string(arrays.at("q").shape) + ", " + shape_string(arrays.at("k").shape) + ", " +
                                shape_string(arrays.at("v").shape));
  if (shapes[1] != shapes[2])
    arcal::throw_input(ctx, "k has shape " + shape_string(arrays.at("k").shape) + " but v has " +
                                shape_string(arrays.at("v").shape) + "; they must match");
  if (shapes[0][0] != shapes[1][0])
    arcal::throw_input(ctx,
                       "q has " + std::to_string(shapes[0][0]) + " heads but k has " + std::to_string(shapes[1][0]));
  if (shapes[0][2] != shapes[1][2])
    arcal::throw_input(
        ctx, "q has head width d = " + std::to_string(shapes[0][2]) + " but k has d = " + std::to_string(shapes[1][2]));
  f.shape = {std::int64_t(shapes[0][0]), std::int64_t(shapes[0][1]), std::int64_t(shapes[1][1]),
             std::int64_t(shapes[0][2])};
  arcal::cedar::check_inputs(f.q.data(), f.k.data(), f.v.data(), f.shape, ctx);
  if (auto it = arrays.find("chunk_starts"); it != arrays.end()) {
    const arcal::NpyArray& a = it->second;
    if (a.ndim() != 1)
      arcal::throw_input(ctx, "array 'chunk_starts' has shape " + shape_string(a.shape) + ", but must be 1-D [M]");
    if (a.dtype != arcal::DType::i8 && a.dtype != arcal::DType::i4)
      arcal::throw_input(ctx, "array 'chunk_starts' has dtype " + arcal::dtype_descr(a.dtype) +
                                  ", but must be int64 (int32 accepted)");
    f.chunk_starts = a.as_int64(ctx);
    f.has_chunk_starts = true;
  }
  return f;
}

int run_cedar(const CedarConfig& cfg, bool chunk_size_given) {
  Options opt;
  opt.method = parse_method(cfg.method);
  opt.budget = cfg.budget;
  opt.error_target = cfg.error_target;
  opt.causal = cfg.causal;
  opt.sink_chunks = cfg.sink_chunks;
  opt.threads = cfg.threads;
  // The output is compared with the input by device and inode (another path, a symlink or a hard
  // link to F count too); an existing output is replaced only with --force (atomically, by write_npz).
  arcal::check_output_not_input("--out", cfg.out, {cfg.qkv});
  arcal::check_output_file("--out", cfg.out, cfg.force);
  const QkvFile f = read_qkv(cfg.qkv);
  if (f.has_chunk_starts && chunk_size_given)
    arcal::throw_input("--chunk-size", cfg.qkv + " holds chunk_starts; give either the file's chunks or --chunk-size");
  const ChunkLayout chunks = f.has_chunk_starts
                                 ? chunks_from_starts(f.chunk_starts, f.shape.n_keys, "arcal cedar: " + cfg.qkv)
                                 : fixed_chunks(f.shape.n_keys, cfg.chunk_size);
  check_options(opt, f.shape, chunks);
  std::vector<float> out(f.q.size());
  std::vector<std::int32_t> expanded(std::size_t(f.shape.heads * f.shape.n_queries));
  const Stats st = attention(f.q.data(), f.k.data(), f.v.data(), f.shape, chunks, opt, out.data(), expanded.data());
  double rel = -1, dense_seconds = 0;
  if (cfg.vs_dense) {
    Options od = opt;
    od.method = Method::dense;
    od.error_target = 0;
    std::vector<float> dense(f.q.size());
    const Stats sd = attention(f.q.data(), f.k.data(), f.v.data(), f.shape, chunks, od, dense.data(), nullptr);
    dense_seconds = sd.kernel_seconds;
    rel = relative_error(out.data(), dense.data(), out.size());
  }
  const auto H = std::size_t(f.shape.heads), Nq = std::size_t(f.shape.n_queries), d = std::size_t(f.shape.dim);
  arcal::write_npz(
      cfg.out,
      {arcal::NpyArray::from_float("out", out, {H, Nq, d}), arcal::NpyArray::from_int32("expanded", expanded, {H, Nq})},
      false);
  nlohmann::json j = {
      {"schema", "arcal.cedar/1"},
      {"file", cfg.qkv},
      {"out", cfg.out},
      {"method", to_string(opt.method)},
      {"heads", f.shape.heads},
      {"n_queries", f.shape.n_queries},
      {"n_keys", f.shape.n_keys},
      {"dim", f.shape.dim},
      {"chunk_size", f.has_chunk_starts ? nlohmann::json(nullptr) : nlohmann::json(cfg.chunk_size)},
      {"chunk_source", f.has_chunk_starts ? "chunk_starts" : "chunk_size"},
      {"chunks", chunks.chunks()},
      {"budget", opt.budget},
      {"error_target", opt.error_target > 0 ? nlohmann::json(opt.error_target) : nlohmann::json(nullptr)},
      {"causal", opt.causal},
      {"sink_chunks", opt.sink_chunks},
      {"mean_expanded", st.mean_expanded},
      {"max_expanded", st.max_expanded},
      {"kernel_seconds", st.summary_seconds + st.kernel_seconds},
      {"summary_seconds", st.summary_seconds},
      {"attention_seconds", st.kernel_seconds},
      {"threads", cfg.threads}};
  if (cfg.vs_dense) {
    j["relative_error_vs_dense"] = rel;
    j["dense_seconds"] = dense_seconds;
  }
  if (cfg.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "arcal cedar: {} -> {}\n  method {}, {} heads x {} queries over {} keys (d = {}), {} chunks{}\n", cfg.qkv,
      cfg.out, to_string(opt.method), f.shape.heads, f.shape.n_queries, f.shape.n_keys, f.shape.dim, chunks.chunks(),
      f.has_chunk_starts ? " (chunk_starts)" : "");
  std::cout << fmt::format("  budget {}{}{}, mean expanded {:.3f} (max {})\n", opt.budget,
                           opt.error_target > 0 ? fmt::format(", error target {}", opt.error_target) : "",
                           opt.causal ? ", causal" : "", st.mean_expanded, st.max_expanded);
  std::cout << fmt::format("  kernel {:.4f} s (summaries {:.4f} s)\n", st.summary_seconds + st.kernel_seconds,
                           st.summary_seconds);
  if (cfg.vs_dense) std::cout << fmt::format("  relative error vs dense {:.3e} (dense {:.4f} s)\n", rel, dense_seconds);
  return 0;
}

/// Every option of `arcal cedar` (docs/interface.md "Command options", generated).
const arcal::OptionTable<CedarConfig>& cedar_options() {
  using C = CedarConfig;
  using O = arcal::Option<C>;
  namespace R = arcal::ranges;
  static const arcal::OptionTable<C> table = {
      O("qkv", "--qkv",
        "Input .npz: q [H, Nq, d], k and v [H, N, d] (float32; 2-D means H = 1), optional chunk_starts [M] int64",
        &C::qkv)
          .given()
          .existing(O::Path::existing_file),
      {"method", "--method", "cedar | topk | summary | dense", &C::method},
      {"chunk_size", "--chunk-size", "Keys per chunk (when the file has no chunk_starts)", &C::chunk_size,
       R::cedar_chunk_size},
      {"budget", "--budget", "Cap B on exact chunks per query (cedar, topk)", &C::budget, R::cedar_budget},
      {"error_target", "--error-target",
       "cedar: stop expanding once the remaining error bound is below E x |summary-only output| (0 = always spend "
       "the budget)",
       &C::error_target, R::cedar_error_target},
      {"causal", "--causal", "Queries are the last Nq key positions and see earlier keys only (own chunk exact)",
       &C::causal},
      {"sink_chunks", "--sink-chunks", "The first S chunks are always exact", &C::sink_chunks, R::cedar_sink_chunks},
      {"threads", "--threads", "Worker threads (0 = all cores)", &C::threads, R::worker_threads},
      O("out", "--out", "Output .npz: out [H, Nq, d] float32, expanded [H, Nq] int32", &C::out).given(),
      {"force", "--force", "Replace an existing --out file (atomically; never the input)", &C::force},
      {"vs_dense", "--vs-dense", "Also run dense attention and report the relative output error", &C::vs_dense},
      {"json", "--json", "Print one JSON object (schema arcal.cedar/1)", &C::json},
  };
  return table;
}

arcal::cli::RunFn setup_cedar(CLI::App& app) {
  auto cfg = std::make_shared<CedarConfig>();
  CLI::Option* cs = nullptr;
  for (const auto& [key, opt] : arcal::cli::bind_options(app, cedar_options(), *cfg))
    if (key == "chunk_size") cs = opt;
  return [cfg, cs] { return run_cedar(*cfg, cs->count() > 0); };
}

ARCAL_COMMAND("cedar", "Coarse-to-fine attention routing (CEDAR), hard top-k, summary-only or dense on a q/k/v file",
              setup_cedar);

}  // namespace
