import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-feature affine map, a clamp, then log-softmax over the features.

    Args:
        features (int): width of the last dimension.
        limit (float): values are clamped to [-limit, limit] before the log-softmax.
    """

    def __init__(self, features: int, limit: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features) * 0.5)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): float32 tensor of shape (batch_size, features).

        Returns:
            torch.Tensor: float32 tensor of shape (batch_size, features).
        """
        y = x * self.weight + self.shift
        y = torch.clamp(y, -self.limit, self.limit)
        return torch.log_softmax(y, dim=1)


batch_size = 64
features = 80
limit = 2.5


def get_inputs():
    x = torch.randn(batch_size, features) * 2.0
    return [x]


def get_init_inputs():
    return [features, limit]
