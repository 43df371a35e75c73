// What specviz's kernels share (int8_kernel.cpp: the int8 and float32 products; screen_kernel.cpp:
// the certified argmax head's screens): the ISA switches, the blocks' shapes, a row's per-token uint8
// quantization, an int8 block's exact sums, and how rows are taken in passes.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <tuple>
#include <utility>
#include <type_traits>
#include <vector>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define SPECVIZ_AVX2 1  // 16 outputs as two 8-lane halves
#else
#define SPECVIZ_AVX2 0
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define SPECVIZ_VNNI 1
#else
#define SPECVIZ_VNNI 0
#endif

namespace specviz::kern {
constexpr int64_t BLOCK = 64;  // outputs per block; a block's weights are [K/4][64][4] bytes
constexpr int64_t ROWS = 4;    // rows of x that share one pass over a block's weights
// From PREFETCH_ROWS rows a pass on, the products are busy enough multiplying that the hardware's
// prefetcher falls behind, so they ask for the weight AHEAD 64-byte lines early; narrower passes
// lose by asking (measurements: docs/results-log.md, thirteenth session).
constexpr int PREFETCH_ROWS = 4;
constexpr int64_t AHEAD = 32;
// A block's loop over K for R rows is a function of its own (SPECVIZ_BLOCK_LOOP): inlined into a
// pass loop holding every row count's variant, GCC kept the rows' pointers in vector registers and
// moved one back before each multiply-add (Zen 4, 2 threads: a 30-row float32 product 1.3x slower).
#define SPECVIZ_BLOCK_LOOP __attribute__((noinline))
constexpr int64_t SCREEN_ROWS = 6;  // the int8 screen's (its 24 sums and 4 weights fit AVX-512's 32 registers)

// x [M, K] fp32 (times inv_smooth) -> u [M, Kp] uint8, zero [M] int32, step [M] fp32
inline void quantize_rows(const float* x, const float* inv, int64_t M, int64_t K, int64_t Kp,
                   uint8_t* u, int32_t* zero, float* step) {
  std::vector<float> row(K);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    float lo = 0.f, hi = 0.f;  // the range always holds 0, so 0 is exact (as torch's choose_qparams)
    for (int64_t k = 0; k < K; ++k) {
      float v = inv ? xm[k] * inv[k] : xm[k];
      row[k] = v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    float s = (hi - lo) / 255.f;
    if (!(s > 0.f)) s = 1.f;
    float z = std::nearbyint(-lo / s);
    z = std::min(255.f, std::max(0.f, z));
    float inv_s = 1.f / s;
    uint8_t* um = u + m * Kp;
    for (int64_t k = 0; k < K; ++k) {
      float q = std::nearbyint(row[k] * inv_s) + z;
      um[k] = (uint8_t)std::min(255.f, std::max(0.f, q));
    }
    for (int64_t k = K; k < Kp; ++k) um[k] = (uint8_t)z;  // padding: weights there are 0
    zero[m] = (int32_t)z;
    step[m] = s;
  }
}

// acc [R, 64] for one block: sum_k u[r, k] * w[block n, k]; R a constant, so the sums stay in registers
template <int R>
inline void block_sums(const int8_t* w, const uint8_t* u, int64_t Kp, int32_t* acc) {
  const int64_t quads = Kp / 4;
#if SPECVIZ_VNNI
  // U k-quads a step, each with its own sums: 4 U R independent chains hide vpdpbusd's latency
  // (U = 2 for one or two rows; more would spill the 32 registers)
  constexpr int U = R <= 2 ? 2 : 1;
  __m512i a[U][R][4];
  for (int s = 0; s < U; ++s)
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) a[s][r][j] = _mm512_setzero_si512();
  int64_t q = 0;
  auto step = [&](int s, int64_t quad) {
    const int8_t* wq = w + quad * BLOCK * 4;
    if constexpr (R >= PREFETCH_ROWS)  // a quad step is 4 lines: AHEAD lines are AHEAD / 4 steps
      for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(wq + AHEAD * 64 + l * 64), _MM_HINT_T0);
    const __m512i w0 = _mm512_loadu_si512(wq), w1 = _mm512_loadu_si512(wq + 64);
    const __m512i w2 = _mm512_loadu_si512(wq + 128), w3 = _mm512_loadu_si512(wq + 192);
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, u + r * Kp + quad * 4, 4);
      const __m512i x = _mm512_set1_epi32(four);  // inputs 4 quad .. 4 quad + 3 of row r, in every lane
      a[s][r][0] = _mm512_dpbusd_epi32(a[s][r][0], x, w0);
      a[s][r][1] = _mm512_dpbusd_epi32(a[s][r][1], x, w1);
      a[s][r][2] = _mm512_dpbusd_epi32(a[s][r][2], x, w2);
      a[s][r][3] = _mm512_dpbusd_epi32(a[s][r][3], x, w3);
    }
  };
  for (; q + U <= quads; q += U)
    for (int s = 0; s < U; ++s) step(s, q + s);
  for (; q < quads; ++q) step(0, q);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) {
      __m512i sum = a[0][r][j];
      for (int s = 1; s < U; ++s) sum = _mm512_add_epi32(sum, a[s][r][j]);
      _mm512_storeu_si512(acc + r * BLOCK + j * 16, sum);
    }
#elif defined(__AVX2__)
  // AVX2 has no exact uint8 x int8 sum (vpmaddubsw saturates at 16 bits): both sides widen to
  // int16 and vpmaddwd sums pairs into int32, exactly; vphaddd adds the pairs of two groups of 4
  // outputs, so 8 registers a row hold the block's 64 sums, and the weight streams in order.
  thread_local std::vector<int64_t> wide;  // each row's quads widened to int16 once: [R][quads]
  wide.resize(R * quads);
  for (int r = 0; r < R; ++r)
    for (int64_t q = 0; q < quads; ++q) {
      const uint8_t* uq = u + r * Kp + q * 4;
      wide[r * quads + q] = (int64_t)((uint64_t)uq[0] | (uint64_t)uq[1] << 16 | (uint64_t)uq[2] << 32 |
                                      (uint64_t)uq[3] << 48);
    }
  const int64_t* xq = wide.data();
  __m256i a[R][BLOCK / 8];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < BLOCK / 8; ++g) a[r][g] = _mm256_setzero_si256();
  for (int64_t q = 0; q < quads; ++q) {
    __m256i x[R];
    for (int r = 0; r < R; ++r) x[r] = _mm256_set1_epi64x(xq[r * quads + q]);
    for (int g = 0; g < BLOCK / 8; ++g) {  // outputs 8g .. 8g + 7, inputs 4q .. 4q + 3: 32 bytes
      const int8_t* wq = w + q * BLOCK * 4 + g * 32;
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq)));
      const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq + 16)));
      for (int r = 0; r < R; ++r)
        a[r][g] = _mm256_add_epi32(a[r][g], _mm256_hadd_epi32(_mm256_madd_epi16(x[r], w0), _mm256_madd_epi16(x[r], w1)));
    }
  }
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);  // per 128-bit lane: n0 n1 n4 n5 | n2 n3 n6 n7
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < BLOCK / 8; ++g)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * BLOCK + g * 8), _mm256_permutevar8x32_epi32(a[r][g], order));
#else
  for (int r = 0; r < R; ++r) {
    int32_t* ar = acc + r * BLOCK;
    for (int64_t n = 0; n < BLOCK; ++n) ar[n] = 0;
    for (int64_t q = 0; q < quads; ++q) {
      const int8_t* wq = w + q * BLOCK * 4;
      const uint8_t* uq = u + r * Kp + q * 4;
      for (int64_t n = 0; n < BLOCK; ++n)
        ar[n] += (int32_t)uq[0] * wq[4 * n] + (int32_t)uq[1] * wq[4 * n + 1] +
                 (int32_t)uq[2] * wq[4 * n + 2] + (int32_t)uq[3] * wq[4 * n + 3];
    }
  }
#endif
}


// Below AVX-512, the float32 products take 16 outputs as two halves of 8 floats: one register each
// on AVX2, two SSE registers in a plain build (GCC's vector types: one source for both builds).
typedef float f8 __attribute__((vector_size(32)));
typedef uint32_t u8x __attribute__((vector_size(32)));
inline f8 load8(const void* p) {
  f8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline f8 splat8(float v) { return f8{v, v, v, v, v, v, v, v}; }
inline f8 mul_add8(f8 a, f8 b, f8 c) {  // a b + c: rounded once where the CPU has FMA
#if defined(__FMA__)
  return (f8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

constexpr int64_t LANES = 16;  // outputs a screen block
constexpr int64_t MAX_ROWS = 12;  // rows a pass: 12 sums + a weight and a row in registers

// rows a pass when M rows are taken in balanced passes of at most MAX_ROWS (0 for none)
inline int64_t row_group(int64_t M) {
  const int64_t passes = std::max<int64_t>(1, (M + MAX_ROWS - 1) / MAX_ROWS);
  return (M + passes - 1) / passes;
}

// f(std::integral_constant<int, rows>) for rows in 1..TOP (more: TOP): a loop's row count as a constant
template <int TOP = MAX_ROWS, int R = 1, typename F>
inline void with_rows(int64_t rows, F&& f) {
  if constexpr (R < TOP) {
    if (rows > R) return with_rows<TOP, R + 1>(rows, f);
  }
  f(std::integral_constant<int, R>{});
}

// block_sums for 1..SCREEN_ROWS rows (more: SCREEN_ROWS)
inline void block_sums(const int8_t* w, const uint8_t* u, int64_t rows, int64_t Kp, int32_t* acc) {
  with_rows<SCREEN_ROWS>(rows, [&](auto R) { block_sums<R()>(w, u, Kp, acc); });
}
}  // namespace specviz::kern
