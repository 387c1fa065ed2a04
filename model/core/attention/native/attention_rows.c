/* One block of attention rows on the CPU: each row's softmax in bits and every reduction a summary reads, in one
 * pass over the row while it is in the cache (model/core/attention/native/__init__.py calls it;
 * model/core/attention/row_reduction.py and source.py compute the same numbers with torch ops, a dozen passes).
 *
 * Row (h, r) is query i = query0 + r of head h: scores[h, r, k] for keys k < width, in bits (Q K^T x scale x log2 e,
 * plus any bias x log2 e). Every key before `first` is seen; key k >= first is seen where allowed[r * stride + k].
 * Out, for each row:
 * - in place of its scores, the softmax p[h, r, k] as eager attention computes it: 2^(s - max s), s floored at
 *   max s + floor_bits (every seen key's probability stays a normal float); a hidden key exactly 0; a row that sees
 *   no key uniform;
 * - stats[h, r, :] = (entropy in bits, sum_k p |i - k|, p[0], p[i - 1], p[i]), the last two 0 where that key is not
 *   computed, and with positional = 0 (queries and keys not one sequence) the distance, previous and self 0;
 * - thumb[h, r, b] = the row's sum over the key columns thumb_starts[b] .. thumb_starts[b + 1] - 1;
 * - if roll is given, roll[r, b] = the heads' sums of the same over roll_starts (the heads' rows added first, then
 *   summed over the blocks once: a long text's rollout blocks hold a few keys each);
 * - if norms is given, norms[h, r] = the row's log2 normaliser in bits, max s + log2(sum 2^(s - max s)) (the sink's
 *   term in the sum), so that p[h, r, k] = 2^(s - norms[h, r]) for every key seen (but floored ones); NaN for a row
 *   that sees no key (its uniform p is not of its scores).
 * Where `sinks` is given (heads,), in bits, head h's sink logit is one more key of each of its rows, as GPT-OSS's
 * eager attention has it: it joins the row's greatest score and its sum (max' = max(max, sink), sum' += 2^(sink -
 * max')), and its probability is dropped, so the row sums to 1 less the sink's share (the entropy is the keys').
 * Column blocks of a few keys (a long text's rollout, a short one's thumbnail) are summed sixteen blocks at once by
 * AVX-512 gathers where the processor has them (one loop a block cost its set-up for a handful of adds).
 * A score that is NaN, or +inf, makes its row's every number NaN, as the torch ops and eager attention do (a hidden
 * key's score counts as score - FLT_MAX, as the torch ops add the mask); -inf is floored like any low score. So the
 * kernel is compiled without the finite-math assumption of -ffast-math.
 * Rows are shared among `threads` OpenMP threads (one thread where it is built without OpenMP).
 *
 * attention_rows_from_queries does the same from the queries and keys, on processors with AVX-512: it makes the
 * scores itself, twelve rows of a head at a time (6 rows x 64 keys of sums held in registers), reduces those rows
 * while they are still in the L2 cache, and multiplies them by the values for attention's output (6 rows x 64 of
 * d_head at a time). A BLAS's products of a long text's block write and read scores larger than the caches
 * (SmolLM2 at 8,190 tokens: Q K^T at 61 GFLOP/s in the run on a 2-core AMD EPYC; this kernel's product tile alone,
 * 140-195). Each sum runs in order, one fused multiply-add a term.
 *
 * Both return DONE, or OUT_OF_MEMORY where a working buffer could not be allocated (the outputs then unfinished);
 * the caller checks every index they take (native/__init__.py's run_kernel). Built with -march=native, the library
 * says which instruction set extensions its compiler used (built_for) and whether the processor has each
 * (processor_has), for the caller to check before it calls anything else of it. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

enum { DONE = 0, OUT_OF_MEMORY = 1, CANNOT = 2 }; /* what the kernels return (CANNOT: no AVX-512 to make scores) */

static int64_t allocation_limit = INT64_MAX; /* the largest allocation granted: limit_allocations */

void limit_allocations(int64_t bytes) { allocation_limit = bytes; } /* larger ones fail as malloc's can (tests) */

static void *allocate(int64_t bytes) { return bytes > allocation_limit ? NULL : malloc((size_t)bytes); }

const char *built_for(void) { /* the extensions the compiler used that a processor of its kind may lack */
    return ""
#if defined(__SSE3__)
        " sse3"
#endif
#if defined(__SSSE3__)
        " ssse3"
#endif
#if defined(__SSE4_1__)
        " sse4.1"
#endif
#if defined(__SSE4_2__)
        " sse4.2"
#endif
#if defined(__POPCNT__)
        " popcnt"
#endif
#if defined(__AVX__)
        " avx"
#endif
#if defined(__AVX2__)
        " avx2"
#endif
#if defined(__FMA__)
        " fma"
#endif
#if defined(__BMI__)
        " bmi"
#endif
#if defined(__BMI2__)
        " bmi2"
#endif
#if defined(__AVX512F__)
        " avx512f"
#endif
#if defined(__AVX512VL__)
        " avx512vl"
#endif
#if defined(__AVX512BW__)
        " avx512bw"
#endif
#if defined(__AVX512DQ__)
        " avx512dq"
#endif
#if defined(__AVX512CD__)
        " avx512cd"
#endif
#if defined(__ARM_FEATURE_SVE)
        " sve"
#endif
#if defined(__ARM_FEATURE_SVE2)
        " sve2"
#endif
        ;
}

int processor_has(const char *name) { /* whether this processor (and its OS) runs the extension built_for names */
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#define HAS(feature) if (!strcmp(name, feature)) return __builtin_cpu_supports(feature) != 0;
    HAS("sse3") HAS("ssse3") HAS("sse4.1") HAS("sse4.2") HAS("popcnt") HAS("avx") HAS("avx2") HAS("fma") HAS("bmi")
    HAS("bmi2") HAS("avx512f") HAS("avx512vl") HAS("avx512bw") HAS("avx512dq") HAS("avx512cd")
#undef HAS
#elif defined(__aarch64__) && defined(__linux__)
    if (!strcmp(name, "sve")) return (getauxval(AT_HWCAP) & (1ul << 22)) != 0; /* HWCAP_SVE */
    if (!strcmp(name, "sve2")) return (getauxval(AT_HWCAP2) & (1ul << 1)) != 0; /* HWCAP2_SVE2 */
#endif
    return 0; /* an extension this build cannot ask about: taken as missing */
}

typedef union { float f; int32_t i; } Bits;

enum { SHORT_BLOCK = 16 }; /* column blocks of at most this many keys are summed sixteen blocks at once */

static inline float exp2_normal(float x) { /* 2^x for x in [-126, 0]: relative error under 1e-7; NaN for NaN */
    float n = rintf(x), f = x - n; /* f in [-0.5, 0.5]; 2^f by a degree-5 polynomial fitted to it */
    n = n >= -126.0f ? n : -126.0f; /* NaN too: no float-to-int conversion of a NaN (f is NaN, so the result) */
    float poly = 1.326697039e-3f;
    poly = poly * f + 9.675459746e-3f;
    poly = poly * f + 5.550742616e-2f;
    poly = poly * f + 2.402212175e-1f;
    poly = poly * f + 6.931469492e-1f;
    poly = poly * f + 1.000000071f;
    Bits scale = {.i = ((int32_t)n + 127) << 23}; /* 2^n */
    return poly * scale.f;
}

static int longest_block(const int32_t *restrict starts, int blocks) {
    int longest = 0;
    for (int b = 0; b < blocks; b++) {
        int length = starts[b + 1] - starts[b];
        longest = length > longest ? length : longest;
    }
    return longest;
}

#if defined(__AVX512F__)
static void short_column_sums(const float *restrict row, int width, const int32_t *restrict starts, int blocks,
                              int longest, float *restrict out) {
    /* column_sums for blocks of a few keys: sixteen blocks at once, their j-th keys gathered into one vector (a
     * loop along each block would cost its set-up for a handful of adds) */
    for (int b0 = 0; b0 < blocks; b0 += 16) {
        __mmask16 lanes = (__mmask16)(blocks - b0 >= 16 ? 0xFFFF : (1u << (blocks - b0)) - 1);
        __m512i lo = _mm512_maskz_loadu_epi32(lanes, starts + b0);
        __m512i hi = _mm512_min_epi32(_mm512_maskz_loadu_epi32(lanes, starts + b0 + 1), _mm512_set1_epi32(width));
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < longest; j++) {
            __m512i k = _mm512_add_epi32(lo, _mm512_set1_epi32(j));
            __mmask16 inside = _mm512_mask_cmplt_epi32_mask(lanes, k, hi);
            if (!inside) break;
            sum = _mm512_add_ps(sum, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), inside, k, row, 4));
        }
        _mm512_mask_storeu_ps(out + b0, lanes, sum);
    }
}
#endif

static void column_sums(const float *restrict row, int width, const int32_t *restrict starts, int blocks,
                        int longest, float *restrict out) {
    /* out[b] = the sum of row[starts[b] .. starts[b + 1] - 1], columns from `width` on being 0; no block longer
     * than `longest` */
    if (starts[blocks] == blocks) { /* a block a column */
        memcpy(out, row, sizeof(float) * width);
        memset(out + width, 0, sizeof(float) * (blocks - width));
        return;
    }
#if defined(__AVX512F__)
    if (longest <= SHORT_BLOCK) {
        short_column_sums(row, width, starts, blocks, longest, out);
        return;
    }
#endif
    for (int b = 0; b < blocks; b++) {
        int lo = starts[b] < width ? starts[b] : width, hi = starts[b + 1] < width ? starts[b + 1] : width;
        float sum = 0.0f;
        for (int k = lo; k < hi; k++) sum += row[k];
        out[b] = sum;
    }
}

static void softmax_row(float *restrict row, const uint8_t *restrict seen, const float *restrict distance,
                        int width, int first, float floor_bits, float sink, float *restrict st, float *norm) {
    /* row: the scores in, the probabilities out (each key's score read before its probability is written). As the
     * torch ops compute it: a hidden key's score is score - FLT_MAX, its 2^x counts in the row's sum (2^floor_bits
     * where any key is seen), and its probability is then 0. */
    float top = -INFINITY; /* the greatest score (hidden keys' included), NaN where any is NaN: torch's amax */
    int any_seen = first > 0, any_nan = 0, uniform = 0; /* the max and the NaN test apart: each a vector reduction */
    #pragma omp simd reduction(max:top) reduction(|:any_nan)
    for (int k = 0; k < first; k++) {
        float v = row[k];
        top = v > top ? v : top;
        any_nan |= v != v;
    }
    #pragma omp simd reduction(max:top) reduction(|:any_nan, any_seen)
    for (int k = first; k < width; k++) {
        float v = seen[k] ? row[k] : row[k] - FLT_MAX;
        top = v > top ? v : top;
        any_nan |= v != v;
        any_seen |= seen[k];
    }
    top = any_nan ? NAN : top;
    top = sink > top ? sink : top; /* -INFINITY: no sink; a NaN row stays NaN */
    float total = 0.0f, bits = 0.0f, far = 0.0f; /* sum 2^x, sum 2^x x, sum 2^x |i - k| over the keys seen */
    if (!any_seen && top == -FLT_MAX) { /* no key seen (every score finite): uniform over every key, as in eager */
        for (int k = 0; k < width; k++) {
            row[k] = 1.0f;
            far += distance[k];
        }
        total = (float)width, bits = 0.0f, uniform = 1;
    } else {
        for (int k = 0; k < first; k++) { /* keys every row sees */
            float x = row[k] - top;
            x = x < floor_bits ? floor_bits : x; /* NaN stays NaN */
            float e = exp2_normal(x);
            row[k] = e;
            total += e, bits += e * x, far += e * distance[k];
        }
        for (int k = first; k < width; k++) { /* the band: the keys the mask lets this row see, and the others */
            float x = (seen[k] ? row[k] : row[k] - FLT_MAX) - top;
            x = x < floor_bits ? floor_bits : x;
            float e = exp2_normal(x);
            total += e;
            if (seen[k]) {
                row[k] = e;
                bits += e * x, far += e * distance[k];
            } else {
                row[k] = e != e ? e : 0.0f; /* 0, or the NaN the torch ops keep */
            }
        }
    }
    float keys = total; /* the keys' part of the sum; the sink's joins it */
    if (sink > -INFINITY) {
        float x = sink - top;
        total += exp2_normal(x < floor_bits ? floor_bits : x);
    }
    float inv = 1.0f / total;
    for (int k = 0; k < width; k++) row[k] *= inv;
    if (norm) *norm = uniform ? NAN : top + log2f(total);
    /* -sum p log2 p, with log2 p = x - log2 total, over keys whose p sum to keys / total (1 without a sink) */
    st[0] = (keys == total ? log2f(total) : log2f(total) * (keys * inv)) - bits * inv;
    st[1] = far * inv;
}

static void reduce_row(float *restrict p, const uint8_t *restrict seen, const float *restrict distance, int width,
                       int first, int64_t i, int positional, float floor_bits, float sink,
                       const int32_t *thumb_starts, int thumb_blocks, int thumb_longest, float *restrict thumb,
                       float *restrict st, float *norm) {
    /* one row of one head (query i): its softmax in place, its statistics, its normaliser (norm: where not NULL) and
     * its thumbnail's column sums */
    softmax_row(p, seen, distance, width, first, floor_bits, sink, st, norm);
    st[2] = p[0];
    st[3] = positional && i >= 1 && i - 1 < width ? p[i - 1] : 0.0f;
    st[4] = positional && i < width ? p[i] : 0.0f;
    if (!positional) st[1] = 0.0f;
    column_sums(p, width, thumb_starts, thumb_blocks, thumb_longest, thumb);
}

int attention_rows(float *scores, const uint8_t *allowed, int64_t stride, int heads, int rows,
                   int width, int first, int64_t query0, int positional, float floor_bits,
                   const int32_t *thumb_starts, int thumb_blocks, float *thumb, const int32_t *roll_starts,
                   int roll_blocks, float *roll, float *stats, int threads, const float *sinks, float *norms) {
    int thumb_longest = longest_block(thumb_starts, thumb_blocks);
    int roll_longest = roll ? longest_block(roll_starts, roll_blocks) : 0;
    int failed = 0; /* a thread's buffers were not granted */
    #pragma omp parallel num_threads(threads)
    {
        float *distance = allocate(sizeof(float) * (int64_t)width); /* |i - k|, for every head's row r */
        float *heads_sum = roll ? allocate(sizeof(float) * (int64_t)width) : NULL; /* the heads' probabilities */
        int ready = distance && (heads_sum || !roll);
        if (!ready) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(static) nowait /* one barrier, the region's end: each thread frees its own */
        for (int r = 0; r < rows; r++) {
            if (!ready) continue;
            int64_t i = query0 + r;
            for (int k = 0; k < width; k++) distance[k] = fabsf((float)(i - k));
            for (int h = 0; h < heads; h++) {
                int64_t row = (int64_t)h * rows + r;
                float *p = scores + row * width;
                reduce_row(p, allowed + r * stride, distance, width, first, i, positional, floor_bits,
                           sinks ? sinks[h] : -INFINITY, thumb_starts, thumb_blocks, thumb_longest,
                           thumb + row * thumb_blocks, stats + row * 5, norms ? norms + row : NULL);
                if (roll)
                    for (int k = 0; k < width; k++) heads_sum[k] = h > 0 ? heads_sum[k] + p[k] : p[k];
            }
            if (roll) /* the rollout's sums, taken once a row */
                column_sums(heads_sum, width, roll_starts, roll_blocks, roll_longest, roll + (int64_t)r * roll_blocks);
        }
        free(distance);
        free(heads_sum);
    }
    return failed ? OUT_OF_MEMORY : DONE;
}

#if defined(__AVX512F__)
enum { MICRO_ROWS = 6, TILE_ROWS = 12 }; /* rows a product tile holds in registers; rows reduced while in the cache */

static inline __mmask16 lanes(int left) { return left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1); }

#define ZERO(t) __m512 a##t##0 = _mm512_setzero_ps(), a##t##1 = a##t##0, a##t##2 = a##t##0, a##t##3 = a##t##0;
#define FMA(t, x) { __m512 b = _mm512_set1_ps(x); a##t##0 = _mm512_fmadd_ps(b, k0, a##t##0); \
    a##t##1 = _mm512_fmadd_ps(b, k1, a##t##1); a##t##2 = _mm512_fmadd_ps(b, k2, a##t##2); \
    a##t##3 = _mm512_fmadd_ps(b, k3, a##t##3); }
#define STORE(t, at) if (t < rows) { float *dst = at; _mm512_mask_storeu_ps(dst, m0, a##t##0); \
    _mm512_mask_storeu_ps(dst + 16, m1, a##t##1); _mm512_mask_storeu_ps(dst + 32, m2, a##t##2); \
    _mm512_mask_storeu_ps(dst + 48, m3, a##t##3); }

static void micro_scores(const float *restrict query, int d, const float *restrict keys, int64_t key_stride, int rows,
                         int width, float *restrict q, float *restrict out) {
    /* out[t * width + k] = sum over j in order of query[t * d + j] keys[j * key_stride + k] (one fused multiply-add
     * each), t < rows <= MICRO_ROWS, k < width: 6 rows x 64 keys of sums held in 24 registers while the keys' 64
     * columns stream past (written out as one register a row and 16 keys, so that no sum goes to memory between).
     * q: room for MICRO_ROWS * d floats, where the rows are copied, the missing ones 0. */
    memcpy(q, query, sizeof(float) * rows * d);
    memset(q + rows * d, 0, sizeof(float) * (MICRO_ROWS - rows) * d);
    for (int k = 0; k < width; k += 64) {
        __mmask16 m0 = lanes(width - k), m1 = lanes(width - k - 16), m2 = lanes(width - k - 32);
        __mmask16 m3 = lanes(width - k - 48);
        ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5)
        const float *column = keys + k;
        for (int j = 0; j < d; j++, column += key_stride) {
            __m512 k0 = _mm512_maskz_loadu_ps(m0, column), k1 = _mm512_maskz_loadu_ps(m1, column + 16);
            __m512 k2 = _mm512_maskz_loadu_ps(m2, column + 32), k3 = _mm512_maskz_loadu_ps(m3, column + 48);
            FMA(0, q[j]) FMA(1, q[d + j]) FMA(2, q[2 * d + j]) FMA(3, q[3 * d + j]) FMA(4, q[4 * d + j])
            FMA(5, q[5 * d + j])
        }
        float *o = out + k; /* row t's scores at o + t * width */
        STORE(0, o) STORE(1, o + width) STORE(2, o + 2 * width) STORE(3, o + 3 * width) STORE(4, o + 4 * width)
        STORE(5, o + 5 * width)
    }
}

static void micro_values(const float *restrict p, int rows, int width, const float *restrict values, int d,
                         float *restrict out, int64_t out_stride) {
    /* out[t * out_stride + c] = sum over k in order of p[t * width + k] values[k * d + c] (one fused multiply-add
     * each), t < rows <= MICRO_ROWS, c < d: P V for 6 rows x 64 of d_head at a time, the sums held in registers */
    const float *row[MICRO_ROWS]; /* each row's probabilities (a missing row reads the last one's, never stored) */
    for (int t = 0; t < MICRO_ROWS; t++) row[t] = p + (int64_t)(t < rows ? t : rows - 1) * width;
    for (int c = 0; c < d; c += 64) {
        __mmask16 m0 = lanes(d - c), m1 = lanes(d - c - 16), m2 = lanes(d - c - 32), m3 = lanes(d - c - 48);
        ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5)
        const float *value = values + c;
        for (int k = 0; k < width; k++, value += d) {
            __m512 k0 = _mm512_maskz_loadu_ps(m0, value), k1 = _mm512_maskz_loadu_ps(m1, value + 16);
            __m512 k2 = _mm512_maskz_loadu_ps(m2, value + 32), k3 = _mm512_maskz_loadu_ps(m3, value + 48);
            FMA(0, row[0][k]) FMA(1, row[1][k]) FMA(2, row[2][k]) FMA(3, row[3][k]) FMA(4, row[4][k])
            FMA(5, row[5][k])
        }
        float *o = out + c; /* row t's at o + t * out_stride */
        STORE(0, o) STORE(1, o + out_stride) STORE(2, o + 2 * out_stride) STORE(3, o + 3 * out_stride)
        STORE(4, o + 4 * out_stride) STORE(5, o + 5 * out_stride)
    }
}
#endif

int query_scores(const float *query, const float *keys, int64_t key_stride, int d, int rows, int width, float *out,
                 int threads) {
    /* out[r * width + k] = query[r, :] . keys[:, k] for r < rows, k < width (query (rows, d); keys (d, key_stride)),
     * each sum as attention_rows_from_queries makes it, MICRO_ROWS rows at a time shared among `threads`: one head's
     * scores alone (model/inspect/head_scores.py reads a long text's head so). CANNOT (nothing done) where
     * makes_scores() is 0. */
#if defined(__AVX512F__)
    int failed = 0;
    #pragma omp parallel num_threads(threads)
    {
        float *q = allocate(sizeof(float) * MICRO_ROWS * (int64_t)d); /* micro_scores's copy of its rows */
        if (!q) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(static) nowait
        for (int r0 = 0; r0 < rows; r0 += MICRO_ROWS) {
            if (!q) continue;
            micro_scores(query + (int64_t)r0 * d, d, keys, key_stride, rows - r0 < MICRO_ROWS ? rows - r0 : MICRO_ROWS,
                         width, q, out + (int64_t)r0 * width);
        }
        free(q);
    }
    return failed ? OUT_OF_MEMORY : DONE;
#else
    (void)query, (void)keys, (void)key_stride, (void)d, (void)rows, (void)width, (void)out, (void)threads;
    return CANNOT;
#endif
}

int makes_scores(void) { /* whether attention_rows_from_queries computes (built with AVX-512) */
#if defined(__AVX512F__)
    return 1;
#else
    return 0;
#endif
}

int attention_rows_from_queries(const float *query, const float *keys, int64_t key_stride, int d, int group,
                                 const float *values, int64_t value_stride, int dv, float *output,
                                 int64_t output_stride,
                                 float *scores, const uint8_t *allowed, int64_t stride, int heads, int rows,
                                 int width, int first, int64_t query0, int positional, float floor_bits,
                                 const int32_t *thumb_starts, int thumb_blocks, float *thumb,
                                 const int32_t *roll_starts, int roll_blocks, float *roll, float *stats,
                                 int threads, const float *sinks, float *norms) {
    /* attention_rows, the scores made here: scores[h, r, k] = query[h, r, :] . keys[h / group, :, k] for k < width
     * (query (heads, rows, d), in bits; keys (heads / group, d, key_stride)), TILE_ROWS rows of a head at a time,
     * each reduced while its scores are in the cache; and where `values` is given, attention's output from them:
     * output[h * output_stride + r * dv + c] = sum_k p[h, r, k] values[(h / group) * value_stride + k * dv + c].
     * CANNOT (and nothing done) where makes_scores() is 0. */
#if defined(__AVX512F__)
    int thumb_longest = longest_block(thumb_starts, thumb_blocks);
    int roll_longest = roll ? longest_block(roll_starts, roll_blocks) : 0;
    int failed = 0; /* a thread's buffers were not granted */
    #pragma omp parallel num_threads(threads)
    {
        float *distance = allocate(sizeof(float) * TILE_ROWS * (int64_t)width); /* |i - k| for the tile's rows */
        float *heads_sum = roll ? allocate(sizeof(float) * TILE_ROWS * (int64_t)width) : NULL; /* heads' p */
        float *q = allocate(sizeof(float) * MICRO_ROWS * (int64_t)d); /* micro_scores's copy of its rows */
        int ready = distance && q && (heads_sum || !roll);
        if (!ready) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(static) nowait /* (as attention_rows') */
        for (int r0 = 0; r0 < rows; r0 += TILE_ROWS) {
            if (!ready) continue;
            int tile = rows - r0 < TILE_ROWS ? rows - r0 : TILE_ROWS;
            for (int t = 0; t < tile; t++)
                for (int k = 0; k < width; k++) distance[t * width + k] = fabsf((float)(query0 + r0 + t - k));
            for (int h = 0; h < heads; h++) {
                int64_t row = (int64_t)h * rows + r0; /* the tile's first row of head h */
                for (int t = 0; t < tile; t += MICRO_ROWS)
                    micro_scores(query + (row + t) * d, d, keys + (int64_t)(h / group) * d * key_stride, key_stride,
                                 tile - t < MICRO_ROWS ? tile - t : MICRO_ROWS, width, q, scores + (row + t) * width);
                for (int t = 0; t < tile; t++) {
                    float *p = scores + (row + t) * width;
                    reduce_row(p, allowed + (r0 + t) * stride, distance + t * width, width, first, query0 + r0 + t,
                               positional, floor_bits, sinks ? sinks[h] : -INFINITY, thumb_starts, thumb_blocks,
                               thumb_longest, thumb + (row + t) * thumb_blocks, stats + (row + t) * 5,
                               norms ? norms + row + t : NULL);
                    if (heads_sum)
                        for (int k = 0; k < width; k++)
                            heads_sum[t * width + k] = h > 0 ? heads_sum[t * width + k] + p[k] : p[k];
                }
                if (values)
                    for (int t = 0; t < tile; t += MICRO_ROWS)
                        micro_values(scores + (row + t) * width, tile - t < MICRO_ROWS ? tile - t : MICRO_ROWS, width,
                                     values + (int64_t)(h / group) * value_stride, dv,
                                     output + h * output_stride + (int64_t)(r0 + t) * dv, dv);
            }
            if (heads_sum)
                for (int t = 0; t < tile; t++)
                    column_sums(heads_sum + t * width, width, roll_starts, roll_blocks, roll_longest,
                                roll + (int64_t)(r0 + t) * roll_blocks);
        }
        free(distance);
        free(heads_sum);
        free(q);
    }
    return failed ? OUT_OF_MEMORY : DONE;
#else
    (void)query, (void)keys, (void)key_stride, (void)d, (void)group, (void)values, (void)value_stride, (void)dv;
    (void)output;
    (void)output_stride, (void)scores, (void)allowed, (void)stride;
    (void)heads, (void)rows, (void)width, (void)first, (void)query0, (void)positional, (void)floor_bits;
    (void)thumb_starts, (void)thumb_blocks, (void)thumb, (void)roll_starts, (void)roll_blocks, (void)roll;
    (void)stats, (void)threads, (void)sinks, (void)norms;
    return CANNOT;
#endif
}
