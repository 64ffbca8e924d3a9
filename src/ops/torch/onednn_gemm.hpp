// The bf16 products of the models' linear layers (model/fused_linear.cpp) through oneDNN's matmul
// primitive (Debian's libdnnl), built once per shape and thread and reused. LibTorch 1.13 sent every
// bf16 mm/addmm on an AVX-512 CPU to the same library but rebuilt the primitive's descriptors on each
// call (through ideep): about 13 us per call, some 75 calls per training step, 2-3 % of an ar-vit-tiny
// step (bench/README.md, "Direct oneDNN products"), and the products were bitwise LibTorch's. PyTorch
// 2.x carries its own oneDNN 3.x: the products then agree with LibTorch's within bf16 rounding, not bit
// for bit (its AMX kernels block some sums differently), and the direct path still saves about 5 % of
// an ar-vit-tiny bf16 step on an AMX CPU (docs/perf-log.md, 2026-12-07 session 8).
// tests/ops_torch/test_onednn_gemm.cpp checks every product against a float64 product of the same bf16
// operands on the models' shapes, one and two threads.
#pragma once

#include <torch/torch.h>

namespace arcal {

/// Whether bf16 products can take this path: the CPU condition under which LibTorch 1.13 sends a bf16
/// product to oneDNN (MKLDNN enabled and AVX-512 BW, VL and DQ), so that both paths compute alike.
bool onednn_bf16_gemm_available();

/// a b, plus bias in every row when bias is defined: a (M,K) and b (K,N) 2-d bfloat16 CPU tensors,
/// each row-major or column-major (unit stride along one axis; one with gaps between its rows or
/// columns, such as a row selection, is read through a dense copy), bias (N) contiguous bfloat16.
/// Returns a new contiguous (M,N) bf16 tensor, at::mm(a, b) (plus the bias) within bf16 rounding
/// (bitwise under LibTorch 1.13, which called the same oneDNN), or an undefined tensor where the product is not
/// one LibTorch sends to oneDNN (onednn_bf16_gemm_available false, M K N <= 16^3, other dtypes or
/// strides) or where oneDNN fails to execute it (that shape then stays with LibTorch in this thread):
/// the caller then uses LibTorch's operators. On the thread count at::get_num_threads() gives.
torch::Tensor onednn_bf16_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias = {});

}  // namespace arcal
