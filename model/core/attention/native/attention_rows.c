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
 *   summed over the blocks once: a long text's rollout blocks hold a few keys each).
 * Column blocks of a few keys (a long text's rollout, a short one's thumbnail) are summed sixteen blocks at once by
 * AVX-512 gathers where the processor has them (one loop a block cost its set-up for a handful of adds).
 * A score that is NaN, or +inf, makes its row's every number NaN, as the torch ops and eager attention do (a hidden
 * key's score counts as score - FLT_MAX, as the torch ops add the mask); -inf is floored like any low score. So the
 * kernel is compiled without the finite-math assumption of -ffast-math.
 * Rows are shared among `threads` OpenMP threads (one thread where it is built without OpenMP). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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
                        int width, int first, float floor_bits, float *restrict st) {
    /* row: the scores in, the probabilities out (each key's score read before its probability is written). As the
     * torch ops compute it: a hidden key's score is score - FLT_MAX, its 2^x counts in the row's sum (2^floor_bits
     * where any key is seen), and its probability is then 0. */
    float top = -INFINITY; /* the greatest score (hidden keys' included), NaN where any is NaN: torch's amax */
    int any_seen = first > 0, any_nan = 0; /* the max and the NaN test apart: each loop a vector reduction */
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
    float total = 0.0f, bits = 0.0f, far = 0.0f; /* sum 2^x, sum 2^x x, sum 2^x |i - k| over the keys seen */
    if (!any_seen && top == -FLT_MAX) { /* no key seen (every score finite): uniform over every key, as in eager */
        for (int k = 0; k < width; k++) {
            row[k] = 1.0f;
            far += distance[k];
        }
        total = (float)width, bits = 0.0f;
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
    float inv = 1.0f / total;
    for (int k = 0; k < width; k++) row[k] *= inv;
    st[0] = log2f(total) - bits * inv; /* -sum p log2 p, with log2 p = x - log2 total */
    st[1] = far * inv;
}

void attention_rows(float *scores, const uint8_t *allowed, int64_t stride, int heads, int rows,
                    int width, int first, int64_t query0, int positional, float floor_bits,
                    const int32_t *thumb_starts, int thumb_blocks, float *thumb, const int32_t *roll_starts,
                    int roll_blocks, float *roll, float *stats, int threads) {
    int thumb_longest = longest_block(thumb_starts, thumb_blocks);
    int roll_longest = roll ? longest_block(roll_starts, roll_blocks) : 0;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int r = 0; r < rows; r++) {
        int64_t i = query0 + r;
        float distance[width]; /* |i - k|, for every head's row r */
        for (int k = 0; k < width; k++) distance[k] = fabsf((float)(i - k));
        float heads_sum[roll ? width : 1]; /* the heads' probabilities: the rollout's sums are taken once a row */
        for (int h = 0; h < heads; h++) {
            int64_t row = (int64_t)h * rows + r;
            float *p = scores + row * width, *st = stats + row * 5;
            softmax_row(p, allowed + r * stride, distance, width, first, floor_bits, st);
            st[2] = p[0];
            st[3] = positional && i >= 1 && i - 1 < width ? p[i - 1] : 0.0f;
            st[4] = positional && i < width ? p[i] : 0.0f;
            if (!positional) st[1] = 0.0f;
            column_sums(p, width, thumb_starts, thumb_blocks, thumb_longest, thumb + row * thumb_blocks);
            if (roll)
                for (int k = 0; k < width; k++) heads_sum[k] = h > 0 ? heads_sum[k] + p[k] : p[k];
        }
        if (roll)
            column_sums(heads_sum, width, roll_starts, roll_blocks, roll_longest, roll + (int64_t)r * roll_blocks);
    }
}
