#include "train/threads.hpp"

#include <dlfcn.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

#include <cstdlib>
#include <strings.h>
#include <torch/torch.h>

namespace arcal {

void set_compute_threads(int n) {
  if (n < 1) n = 1;
  torch::set_num_threads(n);
  using SetThreads = void (*)(int);
  // Looked up at run time: present when libblas.so.3 resolves to OpenBLAS, absent otherwise.
  if (auto* f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

void keep_freed_memory_for_training() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

void reexec_with_native_openblas_kernels(char** argv) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (std::getenv("OPENBLAS_CORETYPE")) return;  // the user's choice, or our own re-exec
  using CoreName = char* (*)();
  auto* corename = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!corename) return;
  const char* core = corename();
  if (!core || strcasecmp(core, "prescott") != 0) return;
  __builtin_cpu_init();
  const char* native = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    native = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    native = "Haswell";
  if (!native) return;
  if (setenv("OPENBLAS_CORETYPE", native, 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with the kernels we have
#else
  (void)argv;
#endif
}

}  // namespace arcal
