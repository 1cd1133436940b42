/* cpu_supports.h - __builtin_cpu_supports for the fuzz build of src/kernels/ops.c.
 *
 * clang 14 does not know the feature name "f16c" (gcc does), so ops.c's
 * check for its AVX-512 kernels does not compile with clang. The fuzz build
 * forces this header into ops.c alone (-include, see the Makefile), and the
 * macros below route the builtin to a function that reads the same CPUID
 * bits (Intel SDM vol. 2A, CPUID leaves 1 and 7), with the operating
 * system's consent to the AVX and AVX-512 registers (XCR0) as gcc's builtin
 * checks it. */
#include <cpuid.h>
#include <string.h>

static inline int fuzz_cpu_supports(const char *f) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned c1 = c;
    int avx_os = 0, zmm_os = 0;
    if ((c1 >> 27) & 1) {   /* OSXSAVE: XCR0 can be read */
        unsigned lo, hi;
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        avx_os = (lo & 0x6) == 0x6;            /* XMM and YMM state */
        zmm_os = avx_os && (lo & 0xE0) == 0xE0;   /* opmask, ZMM_Hi256, Hi16_ZMM */
    }
    unsigned b7 = 0, c7 = 0;
    if (__get_cpuid_max(0, NULL) >= 7) __cpuid_count(7, 0, a, b7, c7, d);
    if (!strcmp(f, "fma")) return avx_os && ((c1 >> 12) & 1);
    if (!strcmp(f, "f16c")) return avx_os && ((c1 >> 29) & 1);
    if (!strcmp(f, "avx512f")) return zmm_os && ((b7 >> 16) & 1);
    if (!strcmp(f, "avx512bw")) return zmm_os && ((b7 >> 30) & 1);
    if (!strcmp(f, "avx512vl")) return zmm_os && ((b7 >> 31) & 1);
    if (!strcmp(f, "avx512vnni")) return zmm_os && ((c7 >> 11) & 1);
    return 0;
}

#define __builtin_cpu_init() ((void)0)
#define __builtin_cpu_supports(feature) fuzz_cpu_supports(feature)
