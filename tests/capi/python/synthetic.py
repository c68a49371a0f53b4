"""hsring's synthetic hidden states (worker/synthetic_batch.h) in numpy: what a Python
target writes so that hsring's own drafter can check every element it reads."""

import numpy as np

_M = np.uint64(0xFFFFFFFFFFFFFFFF)


def element_bits(batch_id, layer, tokens, hidden, dtype_size):
    """[tokens, hidden] of the bits synthetic_element_bits gives (uint16 or uint32)."""
    with np.errstate(over="ignore"):
        t = np.arange(tokens, dtype=np.uint64)[:, None]
        d = np.arange(hidden, dtype=np.uint64)[None, :]
        x = (np.uint64(batch_id) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(layer) << np.uint64(56))
        x = x ^ (t << np.uint64(24)) ^ (d * np.uint64(0xD1B54A32D192ED03))
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
    h = (x & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    if dtype_size == 4:
        return (h & np.uint32(0x807FFFFF)) | ((np.uint32(120) + ((h >> np.uint32(23)) & np.uint32(15))) << np.uint32(23))
    bits = ((h & np.uint32(0x807F)) | ((np.uint32(120) + ((h >> np.uint32(7)) & np.uint32(15))) << np.uint32(7)))
    return (bits & np.uint32(0xFFFF)).astype(np.uint16)


def layer_array(shape, batch_id, layer, tokens):
    """The layer as the ring's numpy dtype (fp32 floats, fp16 floats, bf16 bits)."""
    bits = element_bits(batch_id, layer, tokens, shape.hidden_size, shape.dtype_size)
    if shape.dtype == "fp32":
        return bits.view(np.float32)
    if shape.dtype == "fp16":
        return bits.view(np.float16)
    return bits
