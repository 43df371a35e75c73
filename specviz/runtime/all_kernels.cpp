// The library's one translation unit: its three sources compiled together, so PyTorch's headers are
// parsed once (apart, 38 CPU-seconds a build; together, 21: 2026-12-07, Zen 3, -O3).
#include "int8_kernel.cpp"
#include "screen_kernel.cpp"
#include "layer_kernel.cpp"
