// ops/torch/compute_threads.hpp: one call sets LibTorch's intra-op threads and OpenBLAS's own pool
// (which torch::set_num_threads does not reach), and a count below 1 means 1.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ops/blas.hpp"
#include "ops/torch/compute_threads.hpp"

TEST(ComputeThreads, SetsLibTorchAndOpenBlasTogether) {
  const int torch_before = torch::get_num_threads(), blas_before = arcal::blas_threads();
  arcal::set_blas_threads(1);
  arcal::set_blas_threads(2);
  const bool pool = arcal::blas_threads() == 2;  // false for a BLAS without a thread pool (always 1)
  arcal::set_blas_threads(1);
  arcal::set_compute_threads(2);
  EXPECT_EQ(torch::get_num_threads(), 2);
  EXPECT_EQ(arcal::blas_threads(), pool ? 2 : 1);
  arcal::set_compute_threads(1);
  EXPECT_EQ(torch::get_num_threads(), 1);
  EXPECT_EQ(arcal::blas_threads(), 1);
  arcal::set_compute_threads(0);  // below 1: one thread, never LibTorch's "all cores"
  EXPECT_EQ(torch::get_num_threads(), 1);
  torch::set_num_threads(torch_before);
  arcal::set_blas_threads(blas_before);
}
