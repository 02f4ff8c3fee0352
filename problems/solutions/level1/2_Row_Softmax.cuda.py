import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <math_constants.h>

constexpr int kThreads = 128;  // one block per row; a multiple of 32

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide reductions through one float per warp in shared memory; every thread gets the result.
__device__ float block_max(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = (threadIdx.x < kThreads / 32) ? red[threadIdx.x] : -CUDART_INF_F;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) red[0] = v;
    __syncthreads();
    v = red[0];
    __syncthreads();  // red is reused by the next reduction
    return v;
}

__device__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = (threadIdx.x < kThreads / 32) ? red[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) red[0] = v;
    __syncthreads();
    v = red[0];
    __syncthreads();
    return v;
}

__global__ void row_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float red[32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    float m = -CUDART_INF_F;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, xr[c]);
    m = block_max(m, red);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += expf(xr[c] - m);
    s = block_sum(s, red);
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = expf(xr[c] - m) / s;
}

torch::Tensor row_softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "row_softmax_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "row_softmax_forward: x must be float32");
    TORCH_CHECK(x.dim() == 2, "row_softmax_forward: x must be 2-D");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    if (rows == 0 || cols == 0) return y;
    TORCH_CHECK(rows <= 2147483647LL, "row_softmax_forward: too many rows");
    row_softmax_kernel<<<(unsigned)rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor row_softmax_forward(torch::Tensor x);"

_ext = load_inline(
    name="kbench_bundled_l1_row_softmax_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["row_softmax_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Row softmax: one CUDA block per row, max and sum by warp shuffles (exponentials recomputed on the
    write pass rather than stored)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.row_softmax_forward(x)
