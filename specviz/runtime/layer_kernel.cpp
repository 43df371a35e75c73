// One decoder layer in one call: torch.ops.specviz_int8.layer, for the static decode step of an int8
// draft or a float32 model (body.py's DecoderBody.layer, written out in C++).
//
// A small model's layer is ~30 small tensor ops around 4 products, each dispatched alone, costing
// as much as the products (docs/results-log.md). Here a layer is one op: DecoderBody.layer's float32
// arithmetic in plain loops, the products on int8_product or dense_product (whose rows have the same
// bits at every width: a verify pass's rows are the decode step's).
//
// For n new tokens, h [n, d] -> [n, d], with (Llama; Gemma 3 adds the bracketed steps, Qwen3 the
// q/k norm alone, its scale the third; biases, Qwen2's, come with the products):
//   x = norm(h, w0); q, k, v = x W_qkv; [q, k = norm(q, k by head, w4)]; q, k = rope(q, k)
//   K[:, pos], V[:, pos] = k, v; o = softmax(scaling q K^T + mask) V    (kv head j // g for query head j)
//   o = o W_o; h = h + [norm](o, [w1]); x = norm(h, w1 [w2]); a = act(x W_gate) * (x W_up)
//   h = h + [norm](a W_down, [w3])        act: silu (Llama), gelu tanh (Gemma 3)
// Attention skips the slots the mask hides (-inf: they weigh exactly 0).
#include "int8_kernel.h"

#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/silu.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {
constexpr int64_t LANES = 16;  // partial sums a dot product keeps (the compiler vectorizes them)

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[LANES] = {0.f};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int64_t j = 0; j < LANES; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.f;
  for (int64_t j = 0; j < LANES; ++j) s += acc[j];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w[r % w_rows], rows of length d (y may be x)
void rms_norm(const float* x, const float* w, int64_t rows, int64_t d, int64_t w_rows, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* wr = w + (r % w_rows) * d;
    const float inv = 1.f / std::sqrt(dot(xr, xr, d) / (float)d + eps);
    float* yr = y + r * d;
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * wr[i];
  }
}

// x [heads, hd] in place: x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[hd/2:], x[:hd/2])
void rope(float* x, const float* cos, const float* sin, int64_t heads, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t t = 0; t < heads; ++t) {
    float* xt = x + t * hd;
    for (int64_t i = 0; i < half; ++i) {
      const float a = xt[i], b = xt[i + half];
      xt[i] = a * cos[i] - b * sin[i];
      xt[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

struct Product {  // one projection's tensors: int8 (int8_product) or float32 blocked (dense_product)
  const at::Tensor& w;
  const float* scale;
  const int32_t* wsum;
  const float* bias;
  const float* inv_smooth;
  int64_t n;
  bool dense;
};

const float* data_or_null(const at::Tensor& t) { return t.numel() ? t.data_ptr<float>() : nullptr; }

Product product(const std::vector<at::Tensor>& w, const std::vector<at::Tensor>& scales,
                const std::vector<at::Tensor>& wsums, const std::vector<at::Tensor>& biases,
                const std::vector<at::Tensor>& smooths, const std::vector<int64_t>& outs, size_t i, int64_t K) {
  TORCH_CHECK(biases[i].numel() == 0 || (biases[i].numel() == outs[i] && biases[i].is_contiguous()), "a bias must be [out]");
  if (w[i].scalar_type() == at::kFloat) {  // float32: no steps, row sums or smoothing
    specviz::check_dense_weight(w[i], K, outs[i]);
    return {w[i], nullptr, nullptr, data_or_null(biases[i]), nullptr, outs[i], true};
  }
  specviz::check_int8_weight(w[i], scales[i], wsums[i], K, outs[i]);
  TORCH_CHECK(smooths[i].numel() == 0 || (smooths[i].numel() == K && smooths[i].is_contiguous()), "a smoothing must be [in]");
  return {w[i], scales[i].data_ptr<float>(), wsums[i].data_ptr<int32_t>(), data_or_null(biases[i]),
          data_or_null(smooths[i]), outs[i], false};
}

void run(const Product& p, const float* x, int64_t M, int64_t K, float* y) {
  if (p.dense)
    specviz::dense_product(x, M, K, p.w, p.bias, p.n, y);
  else
    specviz::int8_product(x, M, K, p.w, p.scale, p.wsum, p.bias, p.inv_smooth, p.n, y);
}
}  // namespace

// h [n, d]; norms: [d] scales (Llama 2, Gemma 3 4), then q's and k's [h + kv, hd] for Gemma 3 and Qwen3;
// per product (q/k/v, o, gate/up, down): blocked weight (int8, or float32), steps, row sums, bias,
// smoothing (an empty tensor: none) and output size; cos, sin [n, 1, hd]; mask [n, S] additive;
// keys, values [kv, C, hd] (written at pos [n]) -> h [n, d]
at::Tensor layer(const at::Tensor& h_, at::TensorList norms_, at::TensorList w_, at::TensorList scales_,
                 at::TensorList wsums_, at::TensorList biases_, at::TensorList smooths_, at::IntArrayRef outs_,
                 const at::Tensor& cos_, const at::Tensor& sin_, const at::Tensor& mask_, at::Tensor& keys,
                 at::Tensor& values, const at::Tensor& pos_, int64_t heads, int64_t kv, double scaling, double eps_,
                 bool gemma) {
  const std::vector<at::Tensor> norms(norms_.begin(), norms_.end()), w(w_.begin(), w_.end());
  const std::vector<at::Tensor> scales(scales_.begin(), scales_.end()), wsums(wsums_.begin(), wsums_.end());
  const std::vector<at::Tensor> biases(biases_.begin(), biases_.end()), smooths(smooths_.begin(), smooths_.end());
  const std::vector<int64_t> outs(outs_.begin(), outs_.end());
  TORCH_CHECK(h_.dim() == 2 && h_.scalar_type() == at::kFloat, "h must be [n, d] float32");
  TORCH_CHECK((gemma ? norms.size() == 5u : norms.size() == 2u || norms.size() == 3u) && w.size() == 4 &&
              scales.size() == 4 && wsums.size() == 4 &&
              biases.size() == 4 && smooths.size() == 4 && outs.size() == 4, "norms and the four products' tensors");
  for (const auto& t : norms) TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(), "norm scales: float32");
  const at::Tensor h0 = h_.contiguous(), cos = cos_.contiguous(), sin = sin_.contiguous(), mask = mask_.contiguous();
  const at::Tensor pos = pos_.to(at::kLong).contiguous();
  const int64_t n = h0.size(0), d = h0.size(1), hd = cos.size(-1), S = mask.size(1), group = heads / kv;
  const int64_t inter = outs[2] / 2, qk = (heads + kv) * hd;
  TORCH_CHECK(outs[0] == qk + kv * hd && outs[1] == d && outs[3] == d && group * kv == heads, "the layer's sizes disagree");
  TORCH_CHECK(cos.numel() == n * hd && sin.numel() == n * hd && mask.size(0) == n && pos.numel() == n, "rows of cos, sin, mask, pos");
  TORCH_CHECK(keys.scalar_type() == at::kFloat && values.scalar_type() == at::kFloat && keys.dim() == 3 &&
              keys.size(0) == kv && keys.size(2) == hd && keys.stride(2) == 1 && values.sizes() == keys.sizes() &&
              values.strides() == keys.strides() && keys.size(1) >= S, "keys, values must be [kv, C >= S, hd] float32");
  const Product qkv = product(w, scales, wsums, biases, smooths, outs, 0, d);
  const Product o_proj = product(w, scales, wsums, biases, smooths, outs, 1, heads * hd);
  const Product gate_up = product(w, scales, wsums, biases, smooths, outs, 2, d);
  const Product down = product(w, scales, wsums, biases, smooths, outs, 3, inter);
  const float eps = (float)eps_;
  const bool qk_norm = norms.size() == (gemma ? 5u : 3u);  // q and k normed per head, the last scale
  const int64_t* pp = pos.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r) TORCH_CHECK(pp[r] >= 0 && pp[r] < S, "a position outside the slots attention reads");

  at::Tensor out = h0.clone();  // the residual stream
  float* hp = out.data_ptr<float>();
  std::vector<float> x(n * d), y(n * std::max(outs[0], outs[2])), att(n * heads * hd), o(n * d);
  // attention's input: x = norm(h); q | k | v = x W_qkv; q, k normed (Gemma 3) and rotated, by head
  rms_norm(hp, norms[0].data_ptr<float>(), n, d, 1, eps, x.data());
  run(qkv, x.data(), n, d, y.data());
  float *kp = keys.data_ptr<float>(), *vp = values.data_ptr<float>();
  const int64_t sk = keys.stride(0), ss = keys.stride(1);
  for (int64_t r = 0; r < n; ++r) {
    float* row = y.data() + r * outs[0];
    if (qk_norm) rms_norm(row, norms.back().data_ptr<float>(), heads + kv, hd, heads + kv, eps, row);
    rope(row, cos.data_ptr<float>() + r * hd, sin.data_ptr<float>() + r * hd, heads + kv, hd);
    for (int64_t j = 0; j < kv; ++j) {  // this token's keys and values at its slot
      std::copy_n(row + (heads + j) * hd, hd, kp + j * sk + pp[r] * ss);
      std::copy_n(row + qk + j * hd, hd, vp + j * sk + pp[r] * ss);
    }
  }
  // attention: one (row, query head) a task, its kv head's slots the mask shows
  const float* mp = mask.data_ptr<float>();
  at::parallel_for(0, n * heads, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(S);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / heads, j = t % heads, g = j / group;
      const float* q = y.data() + r * outs[0] + j * hd;
      const float* mr = mp + r * S;
      const float* kg = kp + g * sk;
      const float* vg = vp + g * sk;
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < S; ++s) {
        if (std::isinf(mr[s]) && mr[s] < 0) {
          p[s] = -std::numeric_limits<float>::infinity();
          continue;
        }
        p[s] = dot(q, kg + s * ss, hd) * (float)scaling + mr[s];
        top = std::max(top, p[s]);
      }
      float sum = 0.f;
      for (int64_t s = 0; s < S; ++s) {
        p[s] = std::exp(p[s] - top);  // exp(-inf) = 0: a hidden slot
        sum += p[s];
      }
      float* a = att.data() + r * heads * hd + j * hd;
      std::fill_n(a, hd, 0.f);
      for (int64_t s = 0; s < S; ++s) {
        if (p[s] == 0.f) continue;
        const float ps = p[s] / sum;
        const float* vs = vg + s * ss;
        for (int64_t i = 0; i < hd; ++i) a[i] += ps * vs[i];
      }
    }
  });
  run(o_proj, att.data(), n, heads * hd, o.data());
  if (gemma) rms_norm(o.data(), norms[1].data_ptr<float>(), n, d, 1, eps, o.data());
  for (int64_t i = 0; i < n * d; ++i) hp[i] += o[i];
  // the MLP: x = norm(h); a = act(x W_gate) * (x W_up); h += [norm](a W_down)
  rms_norm(hp, norms[gemma ? 2 : 1].data_ptr<float>(), n, d, 1, eps, x.data());
  run(gate_up, x.data(), n, d, y.data());
  // the activation on ATen's vectorized kernel, in place on the gate half: the body's function
  at::Tensor gate = at::from_blob(y.data(), {n, inter}, {outs[2], 1}, h0.options());
  gemma ? (void)at::gelu_(gate, "tanh") : (void)at::silu_(gate);
  std::vector<float> a(n * inter);
  for (int64_t r = 0; r < n; ++r) {
    const float* gu = y.data() + r * outs[2];
    for (int64_t i = 0; i < inter; ++i) a[r * inter + i] = gu[i] * gu[inter + i];
  }
  run(down, a.data(), n, inter, o.data());
  if (gemma) rms_norm(o.data(), norms[3].data_ptr<float>(), n, d, 1, eps, o.data());
  for (int64_t i = 0; i < n * d; ++i) hp[i] += o[i];
  return out;
}

TORCH_LIBRARY_FRAGMENT(specviz_int8, m) {
  m.def("layer(Tensor h, Tensor[] norms, Tensor[] w, Tensor[] scales, Tensor[] wsums, Tensor[] biases, "
        "Tensor[] smooths, int[] outs, Tensor cos, Tensor sin, Tensor mask, Tensor(a!) keys, Tensor(b!) values, "
        "Tensor pos, int heads, int kv_heads, float scaling, float eps, bool gemma) -> Tensor");
}
TORCH_LIBRARY_IMPL(specviz_int8, CPU, m) { m.impl("layer", &layer); }
