import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum of each row of a 2-D tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): float32 tensor of shape (rows, cols).

        Returns:
            torch.Tensor: float32 tensor of shape (rows,).
        """
        return torch.sum(x, dim=1)


rows = 64
cols = 300


def get_inputs():
    x = torch.randn(rows, cols)
    return [x]


def get_init_inputs():
    return []
