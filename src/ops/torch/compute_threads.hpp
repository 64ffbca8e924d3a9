// Compute threads for LibTorch work: torch's intra-op pool and, when LibTorch's BLAS is OpenBLAS
// (Debian's libopenblas0-pthread), OpenBLAS's own pthread pool, which torch::set_num_threads does
// not reach. Without this a "--threads 1" run keeps a second busy OpenBLAS thread. (The choice of
// OpenBLAS's kernels is ops/blas.hpp's.)
#pragma once

namespace arcal {

/// Sets torch's intra-op threads and OpenBLAS's threads (if OpenBLAS is loaded) to n >= 1.
void set_compute_threads(int n);

/// glibc's allocator for a training loop: a step frees and reallocates the same few hundred
/// activation buffers of 0.1-2 MB, which by default go back to the kernel (mmap, trim) and fault in
/// again on the next step. Keeps freed blocks below 64 MiB in the heap (mmap and trim thresholds 64
/// and 256 MiB); about 5 % of an AR-ViT-tiny step (bench/bench_step). No-op outside glibc.
void keep_freed_memory_for_training();

}  // namespace arcal
