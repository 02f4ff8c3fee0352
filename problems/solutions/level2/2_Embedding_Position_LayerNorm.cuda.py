import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int kWarpsPerBlock = 4;  // one warp per token

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// y[t, :] = LayerNorm(tokens[ids[t], :] + positions[t % seq_len, :]) * w + b
__global__ void embed_position_layernorm_kernel(
        const int64_t* __restrict__ ids, const float* __restrict__ tokens, const float* __restrict__ positions,
        const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
        int64_t n_tokens, int64_t seq_len, int64_t dim, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    if (t >= n_tokens) return;  // whole warp leaves together
    const float* tok = tokens + ids[t] * dim;
    const float* pos = positions + (t % seq_len) * dim;
    float* out = y + t * dim;
    float s = 0.0f;
    for (int64_t d = lane; d < dim; d += 32) s += tok[d] + pos[d];
    const float mean = warp_sum(s) / (float)dim;
    float q = 0.0f;
    for (int64_t d = lane; d < dim; d += 32) {
        const float c = (tok[d] + pos[d]) - mean;
        q += c * c;
    }
    const float var = warp_sum(q) / (float)dim;  // biased variance, as LayerNorm
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int64_t d = lane; d < dim; d += 32) out[d] = ((tok[d] + pos[d]) - mean) * rstd * w[d] + b[d];
}

torch::Tensor embed_position_layernorm_forward(torch::Tensor ids, torch::Tensor tokens, torch::Tensor positions,
                                               torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(ids.is_cuda() && tokens.is_cuda() && positions.is_cuda() && w.is_cuda() && b.is_cuda(),
                "embed_position_layernorm_forward: all tensors must be on the GPU");
    TORCH_CHECK(ids.scalar_type() == torch::kInt64, "ids must be int64");
    TORCH_CHECK(tokens.scalar_type() == torch::kFloat32 && positions.scalar_type() == torch::kFloat32 &&
                w.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "weights must be float32");
    TORCH_CHECK(ids.dim() == 2 && tokens.dim() == 2 && positions.dim() == 2, "bad ranks");
    const int64_t batch = ids.size(0), seq_len = ids.size(1), dim = tokens.size(1);
    TORCH_CHECK(positions.size(0) == seq_len && positions.size(1) == dim, "position table shape mismatch");
    auto idc = ids.contiguous();
    auto tc = tokens.contiguous();
    auto pc = positions.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    auto y = torch::empty({batch, seq_len, dim}, tc.options());
    const int64_t n_tokens = batch * seq_len;
    if (n_tokens == 0 || dim == 0) return y;
    const int64_t blocks = (n_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
    embed_position_layernorm_kernel<<<(unsigned)blocks, kWarpsPerBlock * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
        idc.data_ptr<int64_t>(), tc.data_ptr<float>(), pc.data_ptr<float>(), wc.data_ptr<float>(),
        bc.data_ptr<float>(), y.data_ptr<float>(), n_tokens, seq_len, dim, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = (
    "torch::Tensor embed_position_layernorm_forward(torch::Tensor ids, torch::Tensor tokens, "
    "torch::Tensor positions, torch::Tensor w, torch::Tensor b, double eps);"
)

_ext = load_inline(
    name="kbench_bundled_l2_embed_position_layernorm_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["embed_position_layernorm_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Embedding gather + position add + LayerNorm: one warp per token, two-pass statistics."""

    def __init__(self, vocab_size: int, seq_len: int, dim: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Parameter(torch.randn(seq_len, dim) * 0.5)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return _ext.embed_position_layernorm_forward(ids, self.tokens.weight, self.positions, self.norm.weight,
                                                     self.norm.bias, float(self.norm.eps))
