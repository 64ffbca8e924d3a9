#include "train/sbece.hpp"

#include "core/check.hpp"

namespace arcal {

torch::Tensor soft_binned_ece(const torch::Tensor& logits, const torch::Tensor& labels, int bins, double temperature) {
  if (!(temperature > 0.0))
    throw_input("soft_binned_ece", "temperature is " + std::to_string(temperature) + ", but must be > 0");
  if (bins < 1) throw_input("soft_binned_ece", "bins is " + std::to_string(bins) + ", but must be >= 1");
  // At least fp32 (float64 input stays float64).
  auto probs = torch::softmax(logits.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat), -1);
  auto [conf, pred] = probs.max(-1);                                                     // (B)
  auto correct = pred.eq(labels).to(torch::kFloat).detach();                             // (B), not differentiated
  auto anchors = (torch::arange(bins, conf.options()) + 0.5) / double(bins);             // (M)
  auto member = torch::softmax(-(conf.unsqueeze(1) - anchors).pow(2) / temperature, 1);  // (B,M)
  auto mass = member.sum(0);                                                             // (M)
  auto safe = mass.clamp_min(1e-12);
  auto conf_bar = (member * conf.unsqueeze(1)).sum(0) / safe;
  auto acc_bar = (member * correct.unsqueeze(1)).sum(0) / safe;
  auto sq = ((mass / mass.sum()) * (conf_bar - acc_bar).pow(2)).sum();
  return sq.clamp_min(1e-12).sqrt();
}

}  // namespace arcal
