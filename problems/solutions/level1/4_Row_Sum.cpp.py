import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Host C++ (no GPU code): each row is summed with eight independent float accumulators, which the
# compiler can keep in one vector register, then the eight partial sums are added pairwise.
cpp_source = r"""
#include <torch/extension.h>

torch::Tensor row_sum_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "row_sum_forward: x must be on the CPU");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "row_sum_forward: x must be float32");
    TORCH_CHECK(x.dim() == 2, "row_sum_forward: x must be 2-D");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0);
    const int64_t cols = xc.size(1);
    auto out = torch::empty({rows}, xc.options());
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = src + r * cols;
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        int64_t c = 0;
        for (; c + 8 <= cols; c += 8) {
            for (int j = 0; j < 8; ++j) acc[j] += row[c + j];
        }
        for (int j = 0; c < cols; ++c, ++j) acc[j] += row[c];
        dst[r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    return out;
}
"""

_ext = load_inline(
    name="kbench_bundled_l1_row_sum_cpp",
    cpp_sources=cpp_source,
    functions=["row_sum_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Row sums computed by a host C++ kernel. Inputs on a GPU are copied to the host and the result
    copied back (correct everywhere, fast nowhere near a GPU kernel: it exists to exercise the C++ build)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu":
            return _ext.row_sum_forward(x)
        return _ext.row_sum_forward(x.cpu()).to(x.device)
