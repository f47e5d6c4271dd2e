// FLATSTATE_TARGET_CLONES: the attribute that compiles a loop-heavy kernel three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline, with the body picked once at load
// by the CPU's features (an ifunc). One machine always runs the same clone, so batch invariance
// and the chunked forms' bit-exact splits hold on it; the clones round differently from each other
// (fused or separate multiply-adds) only within the forms' stated tolerances.
//
// GCC only, and not under AddressSanitizer or ThreadSanitizer: clang 14 (the sanitizer and fuzzer
// builds, scripts/sanitize.sh) ran an AVX-512 body on an AVX2-only CPU with these clones (SIGILL
// in small_matmul_test, 2026-11-27), and GCC's TSan instruments the clones' resolver, which the
// dynamic loader runs before TSan's runtime starts (every TSan test binary linking the kernels
// crashed while loading, in Rwkv7StepCpu's resolver, 2026-11-28); the sanitizer builds have always
// compiled each kernel once. There the attribute is empty and the kernel is compiled once for the
// build's target.
#ifndef FLATSTATE_KERNELS_CPU_TARGET_CLONES_H_
#define FLATSTATE_KERNELS_CPU_TARGET_CLONES_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FLATSTATE_TARGET_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FLATSTATE_TARGET_CLONES
#endif

#endif  // FLATSTATE_KERNELS_CPU_TARGET_CLONES_H_
