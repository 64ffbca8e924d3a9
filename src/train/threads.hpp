// Compute threads for LibTorch work: torch's intra-op pool and, when LibTorch's BLAS is OpenBLAS
// (Debian's libopenblas0-pthread), OpenBLAS's own pthread pool, which torch::set_num_threads does
// not reach. Without this a "--threads 1" run keeps a second busy OpenBLAS thread.
#pragma once

namespace arcal {

/// Sets torch's intra-op threads and OpenBLAS's threads (if OpenBLAS is loaded) to n >= 1.
void set_compute_threads(int n);

}  // namespace arcal
