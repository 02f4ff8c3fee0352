import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish (SiLU) activation followed by a constant gain: y = scale * x * sigmoid(x).

    Args:
        scale (float): gain applied after the activation.
    """

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): float32 tensor of shape (batch_size, features).

        Returns:
            torch.Tensor: float32 tensor of the same shape.
        """
        return self.scale * (x * torch.sigmoid(x))


batch_size = 32
features = 128
scale = 1.75


def get_inputs():
    # randn, not rand: the activation must see negative inputs too
    x = torch.randn(batch_size, features) * 3.0
    return [x]


def get_init_inputs():
    return [scale]
