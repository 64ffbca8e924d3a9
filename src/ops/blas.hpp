// The dense products of the analysis side on the BLAS the project links (OpenBLAS, Debian's
// libopenblas-dev): row-major sgemm, and the library's thread count, which an audit sets for its
// duration (audit/audit_pipeline.cpp) and restores, so that a user's process keeps its own setting.
// No LibTorch: this is what the audit's MLP probes train on.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace arcal {

/// An allocator of 64-byte aligned storage. OpenBLAS's small-matrix kernels take different paths (and
/// round differently) for operands of different alignment, so buffers handed to sgemm_rm come from
/// here: their alignment, and with it every product, then does not depend on the process's malloc
/// (the CLI's tcmalloc against the Python interpreter's glibc malloc gave gains 4e-11 apart).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{64}); }
  template <typename U>
  bool operator==(const Aligned64<U>&) const noexcept {
    return true;
  }
};
/// float storage for BLAS operands (64-byte aligned).
using AlignedFloats = std::vector<float, Aligned64<float>>;

/// C[m, n] = alpha * op(A) op(B) + beta * C, row-major: op(A) is [m, k] (A [m, k], or A [k, m] with
/// trans_a), op(B) is [k, n] (B [k, n], or B [n, k] with trans_b). lda, ldb, ldc are the row strides.
void sgemm_rm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
              int ldb, float beta, float* c, int ldc);

/// The BLAS's worker threads (OpenBLAS's pool; 1 for a BLAS without one).
int blas_threads();
/// Sets the BLAS's worker threads to n >= 1 (values below 1 are taken as 1).
void set_blas_threads(int n);

/// OpenBLAS picks its kernels from the CPU model when the library loads and falls back to the SSE3
/// "Prescott" kernels for a model it does not know, such as the generic "Intel(R) Xeon(R) Processor"
/// of a virtual machine, even where AVX-512 is present (sgemm several times slower). If the loaded
/// OpenBLAS did that on a CPU with AVX-512 (F, BW, DQ, VL) or AVX2 + FMA, re-executes the program once
/// with OPENBLAS_CORETYPE=SkylakeX or Haswell. Returns normally when there is nothing to do: no
/// OpenBLAS, native kernels already, OPENBLAS_CORETYPE set by the user (set it to Prescott to keep the
/// old kernels), or the exec failing. Call first thing in main, before any thread starts.
void reexec_with_native_openblas_kernels(char** argv);

/// Holds the BLAS (a process-wide setting) at n threads while any guard lives: the first guard saves
/// the count and sets n, the last one restores it. Two overlapping audits (two Python threads) used to
/// restore each other's count mid-call, so one ran part of its products on other threads than alone.
/// Guards that overlap share the first one's n.
class BlasThreadsGuard {
 public:
  explicit BlasThreadsGuard(int n);
  ~BlasThreadsGuard();
  BlasThreadsGuard(const BlasThreadsGuard&) = delete;
  BlasThreadsGuard& operator=(const BlasThreadsGuard&) = delete;
};

}  // namespace arcal
