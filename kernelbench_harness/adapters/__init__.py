"""Model adapters: how kbench asks a model (or a file of stored replies) for kernels.

``get_adapter("openai/gpt-5")``, ``get_adapter("cuda-agent")``, ``get_adapter("replay:gens.jsonl")``;
see :mod:`.registry` for every spec form. Importing this package imports no provider SDK.
"""

from __future__ import annotations

from .base import Generation, GenerationRequest, ModelAdapter, SampleSpec
from .chat import ADAPTER_OPTIONS, split_options
from .registry import (
    ENTRY_POINT_GROUP,
    PROVIDERS,
    AdapterInfo,
    AdapterStatus,
    ProviderInfo,
    adapter_status,
    adapter_statuses,
    get_adapter,
    list_adapters,
    parse_model_args,
)
from .retry import ErrorInfo, ErrorKind, RetryPolicy

__all__ = [
    "ADAPTER_OPTIONS",
    "ENTRY_POINT_GROUP",
    "PROVIDERS",
    "AdapterInfo",
    "AdapterStatus",
    "ErrorInfo",
    "ErrorKind",
    "Generation",
    "GenerationRequest",
    "ModelAdapter",
    "ProviderInfo",
    "RetryPolicy",
    "SampleSpec",
    "adapter_status",
    "adapter_statuses",
    "get_adapter",
    "list_adapters",
    "parse_model_args",
    "split_options",
]
