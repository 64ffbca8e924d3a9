#include "model/config.hpp"

#include <vector>

#include "core/check.hpp"

namespace arcal {

std::string to_string(ResidualMode mode) {
  switch (mode) {
    case ResidualMode::Standard: return "standard";
    case ResidualMode::Full: return "full";
    case ResidualMode::Block: return "block";
  }
  return "?";
}

ResidualMode parse_residual_mode(const std::string& name) {
  if (name == "standard") return ResidualMode::Standard;
  if (name == "full") return ResidualMode::Full;
  if (name == "block") return ResidualMode::Block;
  throw_input("--residual", "'" + name + "' is not a residual mode; expected full, block or standard");
}

std::vector<int> ModelConfig::sources_per_point() const {
  std::vector<int> out;
  if (residual == ResidualMode::Standard) return out;
  const int S = effective_block_size();
  for (int l = 0; l < layers(); ++l) {
    const int completed = l / S;            // blocks b_1..b_completed are finished
    const bool has_partial = (l % S) != 0;  // later layers of a block also see b_n^partial
    out.push_back(1 + completed + (has_partial ? 1 : 0));
  }
  const int blocks = (layers() + S - 1) / S;
  out.push_back(1 + blocks);  // final aggregation over [b_0..b_N]
  return out;
}

void validate_model_config(const ModelConfig& c) {
  const std::string f = "model config";
  if (c.dim <= 0 || c.depth <= 0 || c.heads <= 0 || c.mlp_ratio <= 0 || c.classes < 2 || c.channels <= 0)
    throw_input(f, "dim, depth, heads, mlp_ratio and channels must be positive and classes >= 2");
  if (c.dim % c.heads != 0)
    throw_input(f, "dim " + std::to_string(c.dim) + " is not divisible by heads " + std::to_string(c.heads));
  if (c.patch <= 0 || c.image_size % c.patch != 0)
    throw_input(f, "patch " + std::to_string(c.patch) + " must divide the image size " +
                       std::to_string(c.image_size));
  if (c.norm_eps < 0) throw_input(f, "norm_eps must be >= 0");
  if (c.residual == ResidualMode::Block) {
    if (c.block_size < 1 || c.block_size > c.layers())
      throw_input("--block-size", std::to_string(c.block_size) + " must be in [1, " +
                                      std::to_string(c.layers()) + "] (layers L = 2 x depth = " +
                                      std::to_string(c.layers()) + ")");
  }
}

ModelConfig make_model_config(const std::string& preset, int image_size, int channels, int classes,
                              ResidualMode residual, int block_size) {
  ModelConfig c;
  c.preset = preset;
  c.image_size = image_size;
  c.channels = channels;
  c.classes = classes;
  c.residual = residual;
  c.block_size = block_size;
  if (preset == "ar-vit-tiny") {
    c.dim = 64;
    c.depth = 6;
    c.heads = 4;
    c.mlp_ratio = 4;
    c.patch = image_size == 28 ? 7 : 4;
  } else {
    throw_input("--model", "'" + preset + "' is not a known preset; available: ar-vit-tiny");
  }
  validate_model_config(c);
  return c;
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
  j = nlohmann::json{{"preset", c.preset},       {"image_size", c.image_size}, {"channels", c.channels},
                     {"patch", c.patch},         {"dim", c.dim},               {"depth", c.depth},
                     {"heads", c.heads},         {"mlp_ratio", c.mlp_ratio},   {"classes", c.classes},
                     {"residual", to_string(c.residual)}, {"block_size", c.block_size},
                     {"norm_eps", c.norm_eps}};
}

void from_json(const nlohmann::json& j, ModelConfig& c) {
  c.preset = j.at("preset").get<std::string>();
  c.image_size = j.at("image_size").get<int>();
  c.channels = j.at("channels").get<int>();
  c.patch = j.at("patch").get<int>();
  c.dim = j.at("dim").get<int>();
  c.depth = j.at("depth").get<int>();
  c.heads = j.at("heads").get<int>();
  c.mlp_ratio = j.at("mlp_ratio").get<int>();
  c.classes = j.at("classes").get<int>();
  c.residual = parse_residual_mode(j.at("residual").get<std::string>());
  c.block_size = j.at("block_size").get<int>();
  c.norm_eps = j.at("norm_eps").get<double>();
  validate_model_config(c);
}

}  // namespace arcal
