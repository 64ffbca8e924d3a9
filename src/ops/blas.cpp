#include "ops/blas.hpp"

#include <mutex>
#include <cblas.h>
#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>

namespace arcal {

void sgemm_rm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
              int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

int blas_threads() { return openblas_get_num_threads(); }

void set_blas_threads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

namespace {
std::mutex g_guard_mutex;
int g_guard_holders = 0;
int g_guard_saved = 1;
}  // namespace

BlasThreadsGuard::BlasThreadsGuard(int n) {
  std::lock_guard<std::mutex> lock(g_guard_mutex);
  if (g_guard_holders++ == 0) {
    g_guard_saved = blas_threads();
    set_blas_threads(n);
  }
}

BlasThreadsGuard::~BlasThreadsGuard() {
  std::lock_guard<std::mutex> lock(g_guard_mutex);
  if (--g_guard_holders == 0) set_blas_threads(g_guard_saved);
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
