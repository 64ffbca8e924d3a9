// Model configuration: presets (ar-vit-tiny, ...) and residual modes (standard, full, block).
// Presets are part of the public interface (docs/interface.md); everything a model needs is here
// so that a run's config.json can rebuild it exactly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace arcal {

enum class ResidualMode { Standard, Full, Block };

std::string to_string(ResidualMode mode);
/// Throws InputError for anything but "standard", "full" or "block".
ResidualMode parse_residual_mode(const std::string& name);

struct ModelConfig {
  std::string preset = "ar-vit-tiny";
  int image_size = 28;
  int channels = 1;
  int patch = 7;
  int dim = 64;
  int depth = 6;  ///< transformer blocks; routing layers L = 2 * depth
  int heads = 4;
  int mlp_ratio = 4;
  int classes = 10;
  ResidualMode residual = ResidualMode::Full;
  int block_size = 2;      ///< S in sublayers for Block AttnRes (1 = Full)
  double norm_eps = 1e-6;  ///< epsilon of every LayerNorm and RMSNorm

  int layers() const { return 2 * depth; }
  int tokens() const { return (image_size / patch) * (image_size / patch) + 1; }
  /// Routing points P = L + 1 (0 for the standard twin).
  int routing_points() const { return residual == ResidualMode::Standard ? 0 : layers() + 1; }
  /// Effective block size in sublayers (1 for Full).
  int effective_block_size() const { return residual == ResidualMode::Full ? 1 : block_size; }
  /// Sources seen by each routing point, [P].
  std::vector<int> sources_per_point() const;
};

/// Builds a preset for an image size / channel count / class count. Throws InputError for an
/// unknown preset or a patch size that does not divide the image, or an inconsistent block size.
ModelConfig make_model_config(const std::string& preset, int image_size, int channels, int classes,
                              ResidualMode residual, int block_size);

/// Throws InputError naming the field when the configuration is inconsistent.
void validate_model_config(const ModelConfig& config);

void to_json(nlohmann::json& j, const ModelConfig& c);
void from_json(const nlohmann::json& j, ModelConfig& c);

}  // namespace arcal
