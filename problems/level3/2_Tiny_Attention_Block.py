import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal multi-head self-attention: fused QKV projection, softmax(QK^T / sqrt(d)) V, output projection.

    Args:
        dim (int): model width.
        heads (int): number of heads (dim must be a multiple of it).
    """

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): float32 tensor of shape (batch_size, seq_len, dim).

        Returns:
            torch.Tensor: float32 tensor of shape (batch_size, seq_len, dim).
        """
        b, s, d = x.shape
        hd = d // self.heads
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each (b, heads, s, hd)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, d)
        return self.proj(out)


batch_size = 2
seq_len = 16
dim = 32
heads = 2


def get_inputs():
    x = torch.randn(batch_size, seq_len, dim)
    return [x]


def get_init_inputs():
    return [dim, heads]
