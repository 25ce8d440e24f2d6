// What every AVX-512 kernel file includes: the intrinsics, the function-level target attributes
// (the files build without -march flags; their functions run only after CPUID says the CPU has
// AVX-512 F + BW + VL), and the one warning GCC's AVX-512 headers need silenced.
#pragma once

#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass _mm*_undefined_*() temporaries to masked builtins and then warn
// about them (GCC bug 105593) wherever they inline; the warnings are about the headers, not this.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define ADAKV_AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define ADAKV_AVX512_INLINE \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"), always_inline)) inline

// The same plus AVX-512 VNNI (vpdpwssd), for kernels that run only where the CPU also has it
// (quant_detail::cpu_has_avx512_vnni).
#define ADAKV_AVX512_VNNI_FN \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ADAKV_AVX512_VNNI_INLINE                                               \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"), \
                 always_inline)) inline
