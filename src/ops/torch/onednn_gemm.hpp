// The bf16 products of the models' linear layers (model/fused_linear.cpp) through oneDNN's matmul
// primitive, built once per shape and thread and reused. LibTorch 1.13 sends every bf16 mm/addmm on
// an AVX-512 CPU to the same library, but rebuilds the primitive's descriptors on each call (through
// ideep): about 13 us per call, some 75 calls per training step, 2-3 % of an ar-vit-tiny step
// (bench/README.md, "Direct oneDNN products"). The primitive is the one LibTorch's call selects
// (brgemm, same data types and layouts), so the products are bitwise LibTorch's
// (tests/ops_torch/test_onednn_gemm.cpp compares them on the models' shapes, one and two threads).
#pragma once

#include <torch/torch.h>

namespace arcal {

/// Whether bf16 products can take this path: the CPU condition under which LibTorch 1.13 sends a bf16
/// product to oneDNN (MKLDNN enabled and AVX-512 BW, VL and DQ), so that both paths compute alike.
bool onednn_bf16_gemm_available();

/// a b, plus bias in every row when bias is defined: a (M,K) and b (K,N) 2-d bfloat16 CPU tensors,
/// each row-major or column-major (unit stride along one axis), bias (N) contiguous bfloat16. Returns
/// a new contiguous (M,N) bf16 tensor, bitwise at::mm(a, b) (and, with a bias, what fused_linear's
/// bias rows followed by addmm_ give), or an undefined tensor where the product is not one LibTorch
/// sends to oneDNN (onednn_bf16_gemm_available false, M K N <= 16^3, other dtypes or strides): the
/// caller then uses LibTorch's operators. On the thread count at::get_num_threads() gives.
torch::Tensor onednn_bf16_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias = {});

}  // namespace arcal
