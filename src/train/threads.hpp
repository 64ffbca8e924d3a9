// Compute threads for LibTorch work: torch's intra-op pool and, when LibTorch's BLAS is OpenBLAS
// (Debian's libopenblas0-pthread), OpenBLAS's own pthread pool, which torch::set_num_threads does
// not reach. Without this a "--threads 1" run keeps a second busy OpenBLAS thread. Also the choice of
// OpenBLAS's kernels, which it makes from the CPU model when it loads.
#pragma once

namespace arcal {

/// Sets torch's intra-op threads and OpenBLAS's threads (if OpenBLAS is loaded) to n >= 1.
void set_compute_threads(int n);

/// OpenBLAS picks its kernels from the CPU model when the library loads and falls back to the SSE3
/// "Prescott" kernels for a model it does not know, such as the generic "Intel(R) Xeon(R) Processor"
/// of a virtual machine, even where AVX-512 is present (sgemm several times slower). If the loaded
/// OpenBLAS did that on a CPU with AVX-512 (F, BW, DQ, VL) or AVX2 + FMA, re-executes the program once
/// with OPENBLAS_CORETYPE=SkylakeX or Haswell. Returns normally when there is nothing to do: no
/// OpenBLAS, native kernels already, OPENBLAS_CORETYPE set by the user (set it to Prescott to keep the
/// old kernels), or the exec failing. Call first thing in main, before any thread starts.
void reexec_with_native_openblas_kernels(char** argv);

/// glibc's allocator for a training loop: a step frees and reallocates the same few hundred
/// activation buffers of 0.1-2 MB, which by default go back to the kernel (mmap, trim) and fault in
/// again on the next step. Keeps freed blocks below 64 MiB in the heap (mmap and trim thresholds 64
/// and 256 MiB); about 5 % of an AR-ViT-tiny step (bench/bench_step). No-op outside glibc.
void keep_freed_memory_for_training();

}  // namespace arcal
