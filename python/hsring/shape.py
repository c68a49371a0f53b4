"""The ring's shape, as a Python object."""

import ctypes
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from . import _lib

DTYPE_NAMES = {1: "bf16", 2: "fp16", 3: "fp32"}
# numpy has no bfloat16: bf16 elements are their raw bits (uint16) in numpy views.
NUMPY_DTYPES = {1: np.dtype(np.uint16), 2: np.dtype(np.float16), 3: np.dtype(np.float32)}


@dataclass(frozen=True)
class RingShape:
    slot_count: int
    max_tokens: int
    hidden_size: int
    num_layers: int
    dtype: str  # "bf16", "fp16" or "fp32"
    dtype_size: int
    split_layers: bool
    num_targets: int
    num_drafters: int
    hs_min_ready: int
    content: str  # "model" or "synthetic"
    vocab_size: int
    layer_ids: Tuple[int, ...]
    batch_limit: int

    @property
    def numpy_dtype(self):
        """What numpy views of the hidden states hold (bf16: uint16 bits)."""
        return NUMPY_DTYPES[_DTYPE_CODES[self.dtype]]

    @property
    def torch_dtype(self):
        import torch
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.dtype]


_DTYPE_CODES = {v: k for k, v in DTYPE_NAMES.items()}


def from_struct(s):
    return RingShape(
        slot_count=s.slot_count, max_tokens=s.max_tokens, hidden_size=s.hidden_size,
        num_layers=s.num_layers, dtype=DTYPE_NAMES.get(s.dtype, "unknown"),
        dtype_size=s.dtype_size, split_layers=bool(s.split_layers),
        num_targets=s.num_targets, num_drafters=s.num_drafters, hs_min_ready=s.hs_min_ready,
        content="model" if s.content == 1 else "synthetic", vocab_size=s.vocab_size,
        layer_ids=tuple(s.layer_ids[:s.num_layers]), batch_limit=s.batch_limit)


def ring_shape(name):
    """The shape of ring `name` (attached read-only and validated, as the workers do)."""
    out = _lib.ShapeStruct()
    _lib.check(_lib.lib().hs_ring_shape_of(name.encode(), ctypes.byref(out)))
    return from_struct(out)
