#include "ops/torch/compute_threads.hpp"

#include <unistd.h>  // first: it defines __GLIBC__
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <torch/torch.h>

#include "ops/blas.hpp"

namespace arcal {

void set_compute_threads(int n) {
  if (n < 1) n = 1;
  torch::set_num_threads(n);
  set_blas_threads(n);
}

void keep_freed_memory_for_training() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

}  // namespace arcal
