import torch
import torch.nn as nn


class Model(nn.Module):
    """Plain matrix product C = A @ B of two small rectangular matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """
        Args:
            a (torch.Tensor): float32 tensor of shape (M, K).
            b (torch.Tensor): float32 tensor of shape (K, N).

        Returns:
            torch.Tensor: float32 tensor of shape (M, N).
        """
        return torch.matmul(a, b)


M = 64
K = 96
N = 48


def get_inputs():
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    return [a, b]


def get_init_inputs():
    return []
