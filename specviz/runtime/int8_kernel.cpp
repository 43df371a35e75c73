// specviz's int8 product for a few rows (a draft's decode step, a catch-up feed, a tree level):
//   y[m, n] = s_m * s_n * (sum_k u[m, k] w[n, k] - z_m * sum_k w[n, k]) + b[n]
// with u the row m of x (times the smoothing's 1 / s) quantized to uint8 with its own step s_m and
// zero point z_m (asymmetric, per token), w the symmetric int8 weight with one step s_n per output
// row. The sums are exact int32: AVX-512 VNNI's vpdpbusd (uint8 x int8, four products a lane, no
// saturation) where the compiler targets it, int16 pair sums (vpmaddwd) on AVX2, plain loops
// elsewhere. The weight is stored blocked, [N/64, K/4, 64, 4]: 64 outputs x 4 inputs a 256-byte
// step, so one block streams in order.
// Built and loaded by specviz/runtime/int8_kernel.py, per machine, with a float32 product (below),
// the argmax head's screens (screen_kernel.cpp) and a decoder layer in one op (layer_kernel.cpp).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "int8_kernel.h"
#include "kernel_parts.h"

using namespace specviz::kern;

// x [M, K] fp32 (contiguous); w [N/64, Kp/4, 64, 4] int8; scale [N] fp32; wsum [N] int32; bias [N]
// or null; inv_smooth [K] or null -> y [M, N] fp32 (written)
void specviz::int8_product(const float* x, int64_t M, int64_t K, const at::Tensor& w, const float* sp,
                           const int32_t* cp, const float* bp, const float* inv, int64_t N, float* yp) {
  const int64_t blocks = w.size(0), Kp = w.size(1) * 4;
  if (M == 0) return;
  std::vector<uint8_t> u(M * Kp);
  std::vector<int32_t> zero(M);
  std::vector<float> step(M);
  quantize_rows(x, inv, M, K, Kp, u.data(), zero.data(), step.data());
  const int8_t* wp = w.data_ptr<int8_t>();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    alignas(64) int32_t acc[ROWS * BLOCK];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * BLOCK, width = std::min(BLOCK, N - n0);
      for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        const int64_t rows = std::min(ROWS, M - r0);
        block_sums(wp + b * Kp * BLOCK, u.data() + r0 * Kp, rows, Kp, acc);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t m = r0 + r;
          const float s = step[m];
          const int32_t z = zero[m];
          for (int64_t j = 0; j < width; ++j) {
            const int64_t n = n0 + j;
            float v = s * sp[n] * (float)(acc[r * BLOCK + j] - z * cp[n]);
            yp[m * N + n] = bp ? v + bp[n] : v;
          }
        }
      }
    }
  });
}

void specviz::check_int8_weight(const at::Tensor& w, const at::Tensor& scale, const at::Tensor& wsum, int64_t K,
                                int64_t N) {
  const int64_t Kp = w.size(1) * 4;
  TORCH_CHECK(w.scalar_type() == at::kChar && w.dim() == 4 && w.size(2) == BLOCK && w.size(3) == 4 && Kp >= K &&
              w.is_contiguous(), "w must be int8 [N/64, in/4, 64, 4]");
  TORCH_CHECK(w.size(0) * BLOCK >= N && scale.numel() >= N && wsum.numel() >= N, "N does not fit the weights");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && wsum.scalar_type() == at::kInt && scale.is_contiguous() &&
              wsum.is_contiguous(), "scale must be float32 and wsum int32, contiguous");
}

at::Tensor linear(const at::Tensor& x_, const at::Tensor& w, const at::Tensor& scale, const at::Tensor& wsum,
                  const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& inv_smooth, int64_t N) {
  TORCH_CHECK(x_.dim() == 2 && x_.scalar_type() == at::kFloat, "x must be [rows, in] float32");
  at::Tensor x = x_.contiguous();
  const int64_t M = x.size(0), K = x.size(1);
  specviz::check_int8_weight(w, scale, wsum, K, N);
  at::Tensor y = at::empty({M, N}, x.options());
  specviz::int8_product(x.data_ptr<float>(), M, K, w, scale.data_ptr<float>(), wsum.data_ptr<int32_t>(),
                        bias.has_value() ? bias->data_ptr<float>() : nullptr,
                        inv_smooth.has_value() ? inv_smooth->data_ptr<float>() : nullptr, N, y.data_ptr<float>());
  return y;
}

// -- float32 dense: y = x @ W^T + b for a few rows, the body's projections (projections.py) ---------------
// The weight blocked [N/16, K, 16]: 16 outputs a 64-byte step over all K, streamed once for up to
// 12 rows. Each output's sum runs k = 0..K-1 in one chain of float32 multiply-adds whatever the
// width, so a row's result is the same bits in a 1-row and a 9-row call (a verify pass's first row
// is the decode step's). Below AVX-512, two 8-lane halves.
namespace {
template <int R>
SPECVIZ_BLOCK_LOOP void dense_block(const float* w, const float* x, int64_t K, float* out, int64_t ld) {
#if defined(__AVX512F__)
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (R >= PREFETCH_ROWS) _mm_prefetch(reinterpret_cast<const char*>(w + (k + AHEAD) * LANES), _MM_HINT_T0);
    const __m512 wk = _mm512_loadu_ps(w + k * LANES);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * K + k]), wk, acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * ld, acc[r]);
#else  // two 8-lane halves (kernel_parts.h's f8)
  f8 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = f8{};  // (an `= {}` here compiles to a memset call)
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (R >= PREFETCH_ROWS) __builtin_prefetch(w + (k + AHEAD) * LANES);
    const f8 lo = load8(w + k * LANES), hi = load8(w + k * LANES + 8);
    for (int r = 0; r < R; ++r) {
      const f8 xr = splat8(x[r * K + k]);
      acc[r][0] = mul_add8(xr, lo, acc[r][0]);
      acc[r][1] = mul_add8(xr, hi, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) std::memcpy(out + r * ld, acc[r], sizeof(acc[r]));
#endif
}
}  // namespace

// x [M, K] float32 (contiguous); w [ceil(N/16), K, 16] float32 (zero-padded); bias [N] or null
// -> y [M, N] (written; a partial last block through a buffer); bias added after the sum
void specviz::dense_product(const float* x, int64_t M, int64_t K, const at::Tensor& w, const float* bias, int64_t N,
                            float* y) {
  if (M == 0) return;
  const int64_t group = row_group(M);
  const float* wp = w.data_ptr<float>();
  at::parallel_for(0, w.size(0), 1, [&](int64_t b0, int64_t b1) {
    alignas(64) float part[MAX_ROWS * LANES];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * LANES, width = std::min(LANES, N - n0);
      for (int64_t r0 = 0; r0 < M; r0 += group) {
        const int64_t rows = std::min(group, M - r0);
        const bool whole = width == LANES;
        with_rows(rows, [&](auto R) {
          dense_block<R()>(wp + b * K * LANES, x + r0 * K, K, whole ? y + r0 * N + n0 : part, whole ? N : LANES);
        });
        for (int64_t r = 0; r < rows; ++r) {
          float* yr = y + (r0 + r) * N + n0;
          if (!whole) std::memcpy(yr, part + r * LANES, width * sizeof(float));
          if (bias)
            for (int64_t j = 0; j < width; ++j) yr[j] += bias[n0 + j];
        }
      }
    }
  });
}

void specviz::check_dense_weight(const at::Tensor& w, int64_t K, int64_t N) {
  TORCH_CHECK(w.dim() == 3 && w.size(2) == LANES && w.size(1) == K && w.scalar_type() == at::kFloat && w.is_contiguous()
              && w.size(0) * LANES >= N && (w.size(0) - 1) * LANES < N, "w must be float32 [ceil(N/16), in, 16]");
}

// x [M, K] float32; w [ceil(N/16), K, 16] float32 (zero-padded); bias [N] or none -> [M, N]
at::Tensor dense(const at::Tensor& x_, const at::Tensor& w, const c10::optional<at::Tensor>& bias, int64_t N) {
  TORCH_CHECK(x_.dim() == 2 && x_.scalar_type() == at::kFloat, "x must be [rows, in] float32");
  specviz::check_dense_weight(w, x_.size(1), N);
  at::Tensor x = x_.contiguous();
  at::Tensor b = bias.has_value() && bias->defined() ? bias->to(at::kFloat).contiguous() : at::Tensor();
  TORCH_CHECK(!b.defined() || b.numel() == N, "bias must be [N]");
  at::Tensor y = at::empty({x.size(0), N}, x.options());
  specviz::dense_product(x.data_ptr<float>(), x.size(0), x.size(1), w, b.defined() ? b.data_ptr<float>() : nullptr, N,
                         y.data_ptr<float>());
  return y;
}

TORCH_LIBRARY(specviz_int8, m) {
  m.def("linear(Tensor x, Tensor w, Tensor scale, Tensor wsum, Tensor? bias, Tensor? inv_smooth, int N) -> Tensor");
  m.def("dense(Tensor x, Tensor w, Tensor? bias, int N) -> Tensor");
}
TORCH_LIBRARY_IMPL(specviz_int8, CPU, m) {
  m.impl("linear", &linear);
  m.impl("dense", &dense);
}
