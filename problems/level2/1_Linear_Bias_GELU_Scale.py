import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, an extra learned bias, exact (erf) GELU, then a constant gain.

    Args:
        in_features (int): input width.
        out_features (int): output width.
        scale (float): gain applied last.
    """

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.5)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): float32 tensor of shape (batch_size, in_features).

        Returns:
            torch.Tensor: float32 tensor of shape (batch_size, out_features).
        """
        y = self.linear(x) + self.bias
        y = torch.nn.functional.gelu(y)
        return y * self.scale


batch_size = 32
in_features = 64
out_features = 96
scale = 0.8


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, scale]
