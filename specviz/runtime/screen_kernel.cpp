// The certified argmax head's screens (specviz/runtime/argmax_head.py), built into specviz's kernel
// library with int8_kernel.cpp: a bf16 copy of the head in float32 or native bf16 products, and an
// int8 copy on the int8 product's exact sums, each keeping every id its error bound cannot rule
// out; and the survivors' float32 logits read in place.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "int8_kernel.h"
#include "kernel_parts.h"

using namespace specviz::kern;

// -- bf16 screen: y = x @ bf16(W)^T in float32, for the certified argmax head (argmax_head.py) --------
// The weight is bf16 blocked in pairs, [N/16, K/2, 32]: for 16 outputs j and inputs 2k, 2k + 1, the
// 32-bit lane j holds w[j, 2k] (low half) and w[j, 2k + 1] (high half), so one 64-byte load is 16
// outputs x 2 inputs. Two ways to multiply:
// - x float32: each weight widens to float32 exactly (a shift, a mask) and meets x in a float32
//   multiply-add: y is the float32 product of x and bf16(W);
// - x bf16 (the caller rounded it, and says by how much): AVX512-BF16's vdpbf16ps, two exact bf16
//   products into a float32 sum a lane (denormals read and written as zero), twice the float32
//   multiply-adds an instruction and no widening. Without that instruction x widens to float32 and
//   the float32 path runs: the same products.
// Rows are taken up to 12 at a time against one 20 KB block (K = 640), which stays in L1.
namespace {

// 16 float32 sums: one AVX-512 register, else two halves of 8 (kernel_parts.h's f8). U independent
// sums a row (pairs p = u mod U), so R U chains of multiply-adds hide their latency (more on
// AVX-512's 32 registers); from PREFETCH_ROWS rows the weight is asked for AHEAD lines early.
#if defined(__AVX512F__)
using acc16 = __m512;
inline acc16 zero16() { return _mm512_setzero_ps(); }
inline acc16 add16(acc16 a, acc16 b) { return _mm512_add_ps(a, b); }
constexpr int chains_of(int R) { return R == 1 ? 4 : R <= 4 ? 2 : 1; }
constexpr bool PREFETCH = true;
#else
struct acc16 { f8 h[2]; };
inline acc16 zero16() { return acc16{{f8{}, f8{}}}; }
inline acc16 add16(acc16 a, acc16 b) { return acc16{{a.h[0] + b.h[0], a.h[1] + b.h[1]}}; }
constexpr int chains_of(int R) { return R == 1 ? 2 : 1; }
constexpr bool PREFETCH = false;  // (not measured below AVX-512)
#endif

// R rows against one block -> out [R, ld]; step(acc, u, p) adds pair p's products to acc[r][u]
template <int R, typename Step>
void chains(Step step, const uint16_t* w, int64_t K2, float* out, int64_t ld) {
  constexpr int U = chains_of(R);
  acc16 acc[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) acc[r][u] = zero16();
  int64_t p = 0;
  for (; p + U <= K2; p += U)
    for (int u = 0; u < U; ++u) {
      if constexpr (PREFETCH && R >= PREFETCH_ROWS) __builtin_prefetch(w + (p + u + AHEAD) * 2 * LANES);
      step(acc, u, p + u);
    }
  for (; p < K2; ++p) step(acc, 0, p);
  for (int r = 0; r < R; ++r) {
    acc16 sum = acc[r][0];
    for (int u = 1; u < U; ++u) sum = add16(sum, acc[r][u]);
    std::memcpy(out + r * ld, &sum, sizeof(sum));
  }
}

// x float32 [R, 2 K2]: each weight widened exactly (a shift, a mask), float32 multiply-adds
template <int R>
SPECVIZ_BLOCK_LOOP void screen_f32(const uint16_t* w, const float* x, int64_t K2, float* out, int64_t ld) {
  chains<R>([&](auto& acc, int u, int64_t p) {
#if defined(__AVX512F__)
    const __m512i b = _mm512_loadu_si512(w + p * 2 * LANES);
    const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));  // w[j, 2p], exactly
    const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(b, _mm512_set1_epi32((int)0xFFFF0000u)));  // w[j, 2p + 1]
    for (int r = 0; r < R; ++r) {
      acc[r][u] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * 2 * K2 + 2 * p]), even, acc[r][u]);
      acc[r][u] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * 2 * K2 + 2 * p + 1]), odd, acc[r][u]);
    }
#else
    f8 even[2], odd[2];
    for (int h = 0; h < 2; ++h) {  // outputs 8h .. 8h + 7: 32 bytes of pairs
      const u8x b = (u8x)load8(w + p * 2 * LANES + h * LANES);
      even[h] = (f8)(b << 16);  // w[j, 2p], exactly
      odd[h] = (f8)(b & 0xFFFF0000u);  // w[j, 2p + 1], exactly
    }
    for (int r = 0; r < R; ++r) {  // each row's two inputs broadcast once for both halves
      const f8 x0 = splat8(x[r * 2 * K2 + 2 * p]), x1 = splat8(x[r * 2 * K2 + 2 * p + 1]);
      for (int h = 0; h < 2; ++h) acc[r][u].h[h] = mul_add8(x1, odd[h], mul_add8(x0, even[h], acc[r][u].h[h]));
    }
#endif
  }, w, K2, out, ld);
}

#if defined(__AVX512BF16__)
constexpr bool NATIVE_DOT = true;
// x as bf16 pairs (uint32 [R, K2])
template <int R>
SPECVIZ_BLOCK_LOOP void screen_dot(const uint16_t* w, const uint32_t* x, int64_t K2, float* out, int64_t ld) {
  chains<R>([&](auto& acc, int u, int64_t p) {
    const __m512bh b = (__m512bh)_mm512_loadu_si512(w + p * 2 * LANES);
    for (int r = 0; r < R; ++r)
      acc[r][u] = _mm512_dpbf16_ps(acc[r][u], b, (__m512bh)_mm512_set1_epi32((int)x[r * K2 + p]));
  }, w, K2, out, ld);
}
#else
constexpr bool NATIVE_DOT = false;
#endif

// rows r0 .. r0 + rows - 1 of x (bf16 pairs where dot, else float32) against one block -> out [rows, ld]
void screen_block(const uint16_t* wb, const at::Tensor& x, bool dot, int64_t r0, int64_t rows, int64_t K2,
                  float* out, int64_t ld) {
  with_rows(rows, [&](auto R) {
#if defined(__AVX512BF16__)
    if (dot) {
      screen_dot<R()>(wb, reinterpret_cast<const uint32_t*>(x.data_ptr()) + r0 * K2, K2, out, ld);
      return;
    }
#endif
    screen_f32<R()>(wb, x.data_ptr<float>() + r0 * 2 * K2, K2, out, ld);
  });
}

// the screen's rows, checked against w, as the product takes them: bf16 where the CPU multiplies
// bf16 natively (dot), else float32 (a bf16 row widens exactly)
std::pair<at::Tensor, bool> screen_rows(const at::Tensor& x_, const at::Tensor& w) {
  TORCH_CHECK(x_.dim() == 2 && (x_.scalar_type() == at::kFloat || x_.scalar_type() == at::kBFloat16),
              "x must be [rows, in] float32 or bfloat16");
  TORCH_CHECK(w.dim() == 3 && w.size(2) == 2 * LANES && 2 * w.size(1) == x_.size(1) && w.element_size() == 2,
              "w must be 16-bit [N/16, in/2, 32]");
  const bool dot = x_.scalar_type() == at::kBFloat16 && NATIVE_DOT;
  return {dot || x_.scalar_type() == at::kFloat ? x_.contiguous() : x_.to(at::kFloat).contiguous(), dot};
}
}  // namespace

bool screen_dot_native() { return NATIVE_DOT; }

// x [M, K] float32 or bf16, K = 2 K2; w [N/16, K2, 32] bf16 pairs (as int16) -> [M, Np] float32 with
// Np = N/16 * 16 (the caller slices off the padding)
at::Tensor screen(const at::Tensor& x_, const at::Tensor& w) {
  at::Tensor x;
  bool dot;
  std::tie(x, dot) = screen_rows(x_, w);  // (a structured binding cannot be captured by the lambdas below in C++17)
  const int64_t M = x.size(0), K2 = w.size(1), blocks = w.size(0), Np = blocks * LANES;
  at::Tensor y = at::empty({M, Np}, x.options().dtype(at::kFloat));
  if (M == 0) return y;
  const int64_t group = row_group(M);
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, blocks, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t r0 = 0; r0 < M; r0 += group) {
        screen_block(wp + b * K2 * 2 * LANES, x, dot, r0, std::min(group, M - r0), K2, yp + r0 * Np + b * LANES, Np);
      }
  });
  return y;
}

// The screen's candidates in the same pass, for the argmax: y is never written out. A row r keeps
// (id, y) where y >= (its running max) - two_b[r]; the running max only grows, so this is a
// superset of the final y >= max - two_b[r], filtered at the end. A row that keeps more than `cap`
// in a thread reports a NaN max (the caller's full head decides).
namespace {
// bit j (j < LANES): v[j] >= t; with NAN_IN, !(v[j] < t): the same but that a NaN is in
template <bool NAN_IN = false>
inline uint32_t at_least(const float* v, float t) {
#if defined(__AVX512F__) || SPECVIZ_AVX2
  constexpr int order = NAN_IN ? _CMP_NLT_UQ : _CMP_GE_OQ;
#endif
#if defined(__AVX512F__)
  return _mm512_cmp_ps_mask(_mm512_loadu_ps(v), _mm512_set1_ps(t), order);
#elif SPECVIZ_AVX2
  const __m256 tt = _mm256_set1_ps(t);
  return (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v), tt, order)) |
         (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + 8), tt, order)) << 8;
#else
  uint32_t mask = 0;
  for (int j = 0; j < LANES; ++j) mask |= (uint32_t)(NAN_IN ? !(v[j] < t) : v[j] >= t) << j;
  return mask;
#endif
}

struct Kept {  // one thread's candidates and running maxima
  std::vector<float> top;
  std::vector<int64_t> count, row, col;
  std::vector<float> val;
};

// the threads' candidates merged: top [M] = the largest of their tops (NaN where any gave a row up),
// and every (row, col) whose value is >= top - margin[row] (margin null: 0), row-major, cols ascending
std::tuple<at::Tensor, at::Tensor, at::Tensor> survivors(const std::vector<Kept>& parts, int64_t M, const float* margin,
                                                         const at::TensorOptions& options) {
  at::Tensor top = at::full({M}, -std::numeric_limits<float>::infinity(), options.dtype(at::kFloat));
  float* tp = top.data_ptr<float>();
  for (const Kept& k : parts)
    for (int64_t m = 0; m < M; ++m) tp[m] = std::isnan(k.top[m]) || std::isnan(tp[m]) ? std::nanf("") : std::max(tp[m], k.top[m]);
  std::vector<std::tuple<int64_t, int64_t>> kept;
  for (const Kept& k : parts)
    for (size_t i = 0; i < k.row.size(); ++i) {
      const int64_t m = k.row[i];
      if (k.val[i] >= tp[m] - (margin ? margin[m] : 0.f)) kept.emplace_back(m, k.col[i]);
    }
  std::sort(kept.begin(), kept.end());
  at::Tensor rows = at::empty({(int64_t)kept.size()}, options.dtype(at::kLong));
  at::Tensor cols = at::empty({(int64_t)kept.size()}, options.dtype(at::kLong));
  for (size_t i = 0; i < kept.size(); ++i) {
    rows.data_ptr<int64_t>()[i] = std::get<0>(kept[i]);
    cols.data_ptr<int64_t>()[i] = std::get<1>(kept[i]);
  }
  return {top, rows, cols};
}
}  // namespace

// x as for screen; two_b [M] float32; V the head's rows -> (top [M], rows [m] int64, cols [m] int64)
// with top[r] = max_i y[r, i] (NaN where a row kept more than cap) and (rows, cols) every (r, i)
// with y[r, i] >= top[r] - two_b[r], rows ascending, ids ascending within a row
std::tuple<at::Tensor, at::Tensor, at::Tensor> screen_top(const at::Tensor& x_, const at::Tensor& w,
                                                          const at::Tensor& two_b_, int64_t V, int64_t cap) {
  TORCH_CHECK(V <= w.size(0) * LANES && V > (w.size(0) - 1) * LANES, "V does not fit the weight");
  at::Tensor x;
  bool dot;
  std::tie(x, dot) = screen_rows(x_, w);  // (a structured binding cannot be captured by the lambdas below in C++17)
  at::Tensor two_b = two_b_.to(at::kFloat).contiguous();
  const int64_t M = x.size(0), K2 = w.size(1), blocks = w.size(0);
  TORCH_CHECK(two_b.numel() == M, "two_b must have one entry a row");
  const int64_t group = row_group(M);
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  const float* tb = two_b.data_ptr<float>();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<Kept> parts;
  std::mutex lock;
  at::parallel_for(0, blocks, 64, [&](int64_t b0, int64_t b1) {
    Kept k;
    k.top.assign(M, -inf);
    k.count.assign(M, 0);
    std::vector<float> thr(M, -inf);
    alignas(64) float out[MAX_ROWS * LANES];
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t r0 = 0; r0 < M; r0 += group) {
        const int64_t rows = std::min(group, M - r0);
        screen_block(wp + b * K2 * 2 * LANES, x, dot, r0, rows, K2, out, LANES);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t m = r0 + r;
          uint32_t mask = at_least(out + r * LANES, thr[m]);
          for (; mask; mask &= mask - 1) {
            const int j = __builtin_ctz(mask);
            const int64_t id = b * LANES + j;
            if (id >= V) break;  // the padding's outputs (0): not the head's
            const float v = out[r * LANES + j];
            if (v < thr[m]) continue;  // the threshold rose within this block
            if (k.count[m]++ >= cap) { k.top[m] = std::nanf(""); thr[m] = inf; break; }
            k.row.push_back(m), k.col.push_back(id), k.val.push_back(v);
            if (v > k.top[m]) { k.top[m] = v; thr[m] = v - tb[m]; }
          }
        }
      }
    std::lock_guard<std::mutex> g(lock);
    parts.push_back(std::move(k));
  });
  return survivors(parts, M, tb, x.options());
}

// -- int8 screen: the certified argmax head's other screen, on the int8 product's exact sums ---------
// The head quantized per output row (w'_i = scale_i q_i, q_i int8, blocked as int8_product reads it)
// and each row h per token as int8_product quantizes it (h' = (u - z) s): y_i = s scale_i (sum_k u_k
// q_ik - z wsum_i), the integer sum exact. Half the bf16 screen's bytes, and four times its products
// an instruction where the CPU has VNNI. Each (row, i) has its own bound, by Cauchy-Schwarz:
//   |h.w_i - y_i| <= |h| err_i + |h - h'| wn_i + 3.01 u |h'| wn_i   (err_i = |w_i - w'_i|, wn_i = |w'_i|;
// the float conversion and the two products each within u = 2^-24 of h'.w'_i, itself within |h'| wn_i)
// taken 0.1% wide for the float norms. A row keeps (i, y_i + B_i) where y_i + B_i >= max_j (y_j - B_j):
// the true argmax does (its y + B is >= its logit >= every logit >= every y_j - B_j); the max runs
// per thread as blocks pass and the survivors are filtered against the final one.
// x [M, K] float32; w, scale, wsum as int8_product's; err, wn [N] float32; V the head's rows -> (low [M]
// = max_j (y_j - B_j), NaN where a row still kept more than cap after pruning its 2 cap candidates: the
// caller's full head decides; rows [m], cols [m] int64, row-major, ids ascending)
namespace {
void compact(Kept& k) {  // keep a thread's candidates at or above their row's floor so far (k.top), recounted
  size_t o = 0;
  std::fill(k.count.begin(), k.count.end(), 0);
  for (size_t i = 0; i < k.row.size(); ++i) {
    const int64_t m = k.row[i];
    if (!(k.val[i] >= k.top[m])) continue;  // below the floor, or a row given up (NaN)
    k.row[o] = m, k.col[o] = k.col[i], k.val[o] = k.val[i], ++k.count[m], ++o;
  }
  k.row.resize(o), k.col.resize(o), k.val.resize(o);
}
}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> screen8_top(const at::Tensor& x_, const at::Tensor& w, const at::Tensor& scale,
                                                           const at::Tensor& wsum, const at::Tensor& err,
                                                           const at::Tensor& wn, int64_t V, int64_t cap) {
  TORCH_CHECK(x_.dim() == 2 && x_.scalar_type() == at::kFloat, "x must be [rows, in] float32");
  const at::Tensor x = x_.contiguous();
  const int64_t M = x.size(0), K = x.size(1), blocks = w.size(0), Kp = w.size(1) * 4;
  specviz::check_int8_weight(w, scale, wsum, K, V);
  TORCH_CHECK(V > (blocks - 1) * BLOCK && err.numel() >= V && wn.numel() >= V && err.scalar_type() == at::kFloat &&
              wn.scalar_type() == at::kFloat && err.is_contiguous() && wn.is_contiguous(), "err and wn must be float32 [V]");
  std::vector<uint8_t> u(M * Kp);
  std::vector<int32_t> zero(M);
  std::vector<float> step(M), hn(M), dn(M);
  quantize_rows(x.data_ptr<float>(), nullptr, M, K, Kp, u.data(), zero.data(), step.data());
  for (int64_t m = 0; m < M; ++m) {  // |h|, and |h - h'| + 3.01 u |h'| (the terms wn_i multiplies), in double
    double a = 0, b = 0, c = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double h = x.data_ptr<float>()[m * K + k], q = ((double)u[m * Kp + k] - zero[m]) * (double)step[m];
      a += h * h, b += (h - q) * (h - q), c += q * q;
    }
    hn[m] = (float)(std::sqrt(a) * 1.001);
    dn[m] = (float)((std::sqrt(b) + 3.01 * std::ldexp(std::sqrt(c), -24)) * 1.001);
  }
  const int8_t* wp = w.data_ptr<int8_t>();
  const float *sp = scale.data_ptr<float>(), *ep = err.data_ptr<float>(), *np = wn.data_ptr<float>();
  const int32_t* cp = wsum.data_ptr<int32_t>();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<Kept> parts;
  std::mutex lock;
  // each row's max of y - B so far, over every thread's blocks: a thread whose half of the head
  // holds no good row would otherwise keep half of it
  std::vector<std::atomic<float>> shared(M);
  for (auto& f : shared) f.store(-inf);
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    Kept k;
    k.top.assign(M, -inf);  // here: the row's floor, max of y - B as far as this thread knows
    k.count.assign(M, 0);
    alignas(64) int32_t acc[SCREEN_ROWS * BLOCK];
    alignas(64) float hi[BLOCK], lo[BLOCK];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * BLOCK, width = std::min(BLOCK, V - n0);
      for (int64_t r0 = 0; r0 < M; r0 += SCREEN_ROWS) {
        const int64_t rows = std::min(SCREEN_ROWS, M - r0);
        block_sums(wp + b * Kp * BLOCK, u.data() + r0 * Kp, rows, Kp, acc);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t m = r0 + r;
          const float s = step[m], h = hn[m], d = dn[m];
          const int32_t z = zero[m];
          float best = -inf;
          for (int64_t j = 0; j < width; ++j) {  // vectorized: no branch
            const int64_t n = n0 + j;
            const float y = s * sp[n] * (float)(acc[r * BLOCK + j] - z * cp[n]), bound = h * ep[n] + d * np[n];
            hi[j] = y + bound, lo[j] = y - bound;
            best = std::max(best, lo[j]);
          }
          if (std::isnan(k.top[m])) continue;  // this row already kept too many
          float seen = shared[m].load(std::memory_order_relaxed);
          while (best > seen && !shared[m].compare_exchange_weak(seen, best, std::memory_order_relaxed)) {
          }
          const float floor = k.top[m] = std::max(seen, best);
          // 16 outputs a compare: most blocks of most rows hold none at the floor (a scalar test an
          // output cost gemma-3-270m's 9-row pass about 1 ms)
          for (int64_t j0 = 0; j0 < width && !std::isnan(k.top[m]); j0 += LANES) {
            for (uint32_t mask = at_least<true>(hi + j0, floor); mask; mask &= mask - 1) {
              const int64_t j = j0 + __builtin_ctz(mask);
              if (j >= width) break;
              k.row.push_back(m), k.col.push_back(n0 + j), k.val.push_back(hi[j]);
              if (++k.count[m] > 2 * cap) {  // drop what the risen floors rule out (at most once every cap rows kept)
                compact(k);
                if (k.count[m] > cap) { k.top[m] = std::nanf(""); break; }
              }
            }
          }
        }
      }
    }
    std::lock_guard<std::mutex> g(lock);
    parts.push_back(std::move(k));
  });
  return survivors(parts, M, nullptr, x.options());
}

// The survivors' float32 logits: out[i] = h[rows[i]] . w[cols[i]] (h [n, d], w [V, d] float32, rows and
// cols [m] int64), each summed in 16 lanes then across them: a head's rows read where they lie, not
// gathered into a copy
at::Tensor pair_dots(const at::Tensor& h_, const at::Tensor& w_, const at::Tensor& rows_, const at::Tensor& cols_) {
  TORCH_CHECK(h_.dim() == 2 && w_.dim() == 2 && h_.size(1) == w_.size(1) && h_.scalar_type() == at::kFloat &&
              w_.scalar_type() == at::kFloat, "h [n, d] and w [V, d] must be float32");
  const at::Tensor h = h_.contiguous(), w = w_.contiguous(), rows = rows_.to(at::kLong).contiguous(),
                   cols = cols_.to(at::kLong).contiguous();
  TORCH_CHECK(rows.numel() == cols.numel(), "rows and cols must pair up");
  const int64_t m = rows.numel(), d = h.size(1), n = h.size(0), V = w.size(0);
  const int64_t *rp = rows.data_ptr<int64_t>(), *cp = cols.data_ptr<int64_t>();
  for (int64_t i = 0; i < m; ++i) TORCH_CHECK(rp[i] >= 0 && rp[i] < n && cp[i] >= 0 && cp[i] < V, "a pair outside h or w");
  at::Tensor out = at::empty({m}, h.options());
  const float *hp = h.data_ptr<float>(), *wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, m, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float *a = hp + rp[i] * d, *b = wp + cp[i] * d;
      float acc[16] = {0.f};
      int64_t k = 0;
      for (; k + 16 <= d; k += 16)
        for (int j = 0; j < 16; ++j) acc[j] += a[k + j] * b[k + j];
      float sum = 0.f;
      for (int j = 0; j < 16; ++j) sum += acc[j];
      for (; k < d; ++k) sum += a[k] * b[k];
      op[i] = sum;
    }
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(specviz_int8, m) {
  m.def("screen(Tensor x, Tensor w) -> Tensor");
  m.def("screen_top(Tensor x, Tensor w, Tensor two_b, int V, int cap) -> (Tensor, Tensor, Tensor)");
  m.def("screen8_top(Tensor x, Tensor w, Tensor scale, Tensor wsum, Tensor err, Tensor wn, int V, int cap) -> (Tensor, Tensor, Tensor)");
  m.def("pair_dots(Tensor h, Tensor w, Tensor rows, Tensor cols) -> Tensor");
  m.def("screen_dot_native() -> bool", &screen_dot_native);  // no tensors: a catch-all kernel
}
TORCH_LIBRARY_IMPL(specviz_int8, CPU, m) {
  m.impl("screen", &screen);
  m.impl("screen_top", &screen_top);
  m.impl("screen8_top", &screen8_top);
  m.impl("pair_dots", &pair_dots);
}
