import torch
import torch.nn as nn


class Model(nn.Module):
    """Token embedding lookup, plus a learned position table, then LayerNorm.

    The input holds int64 token ids; it must stay integer (casting it to float breaks the lookup).

    Args:
        vocab_size (int): number of rows in the token table.
        seq_len (int): number of positions (rows in the position table).
        dim (int): embedding width.
    """

    def __init__(self, vocab_size: int, seq_len: int, dim: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Parameter(torch.randn(seq_len, dim) * 0.5)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """
        Args:
            ids (torch.Tensor): int64 tensor of shape (batch_size, seq_len), values in [0, vocab_size).

        Returns:
            torch.Tensor: float32 tensor of shape (batch_size, seq_len, dim).
        """
        h = self.tokens(ids) + self.positions
        return self.norm(h)


batch_size = 8
vocab_size = 100
seq_len = 16
dim = 64


def get_inputs():
    ids = torch.randint(0, vocab_size, (batch_size, seq_len), dtype=torch.int64)
    return [ids]


def get_init_inputs():
    return [vocab_size, seq_len, dim]
