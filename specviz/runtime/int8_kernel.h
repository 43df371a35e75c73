// What int8_kernel.cpp lends the other sources of its library (layer_kernel.cpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <cstdint>

namespace specviz {
// y [M, N] = the int8 product of x [M, K] float32 rows (quantized per token, times inv_smooth [K]
// where not null) with the blocked int8 weight w [N/64, Kp/4, 64, 4], its steps scale [N] and row
// sums wsum [N], plus bias [N] where not null; y is written, the output rows split across threads.
void int8_product(const float* x, int64_t M, int64_t K, const at::Tensor& w, const float* scale,
                  const int32_t* wsum, const float* bias, const float* inv_smooth, int64_t N, float* y);

// y [M, N] = x [M, K] float32 rows times the float32 weight w blocked [ceil(N/16), K, 16] (dense_kernel.py),
// plus bias [N] where not null: each output's sum in one chain over k, so a row's bits do not depend on M
void dense_product(const float* x, int64_t M, int64_t K, const at::Tensor& w, const float* bias, int64_t N, float* y);
void check_dense_weight(const at::Tensor& w, int64_t K, int64_t N);  // TORCH_CHECKs w's shape, as dense_product reads it

// TORCH_CHECKs that w, scale and wsum hold an [N, K] int8 product's weight as int8_product reads it
void check_int8_weight(const at::Tensor& w, const at::Tensor& scale, const at::Tensor& wsum, int64_t K, int64_t N);
}  // namespace specviz
