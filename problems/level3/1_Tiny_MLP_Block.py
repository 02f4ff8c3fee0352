import torch
import torch.nn as nn


class Model(nn.Module):
    """Pre-norm residual MLP block: x + fc2(GELU(fc1(LayerNorm(x)))).

    Args:
        dim (int): model width.
        hidden (int): width of the hidden layer.
    """

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): float32 tensor of shape (batch_size, tokens, dim).

        Returns:
            torch.Tensor: float32 tensor of shape (batch_size, tokens, dim).
        """
        h = self.fc1(self.norm(x))
        h = torch.nn.functional.gelu(h)
        return x + self.fc2(h)


batch_size = 4
tokens = 8
dim = 64
hidden = 128


def get_inputs():
    x = torch.randn(batch_size, tokens, dim)
    return [x]


def get_init_inputs():
    return [dim, hidden]
