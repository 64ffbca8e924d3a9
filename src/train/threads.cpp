#include "train/threads.hpp"

#include <dlfcn.h>
#include <torch/torch.h>

namespace arcal {

void set_compute_threads(int n) {
  if (n < 1) n = 1;
  torch::set_num_threads(n);
  using SetThreads = void (*)(int);
  // Looked up at run time: present when libblas.so.3 resolves to OpenBLAS, absent otherwise.
  if (auto* f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

}  // namespace arcal
