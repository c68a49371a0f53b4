"""What a tensor argument is, for the C API: a host pointer with a row pitch, or a CUDA
device pointer with a row pitch and the stream it belongs to. numpy arrays and torch
tensors (CPU or CUDA) are accepted; anything else, or a wrong shape or dtype, is a
ShapeError naming what was expected."""

import sys

import numpy as np

from ._errors import ShapeError


def loaded_torch():
    """torch if this process imported it already, else None: a caller holding a torch
    tensor has, and a numpy-only worker does not pay torch's import (seconds)."""
    return sys.modules.get("torch")


def import_torch():
    try:
        import torch
        return torch
    except ImportError:  # torch is optional
        return None


def is_torch(x):
    torch = loaded_torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _torch_dtype_ok(t, shape):
    return t.dtype == shape.torch_dtype


def _numpy_dtype_ok(a, shape):
    if shape.dtype == "bf16":
        # Raw bits, or ml_dtypes' bfloat16 where installed.
        return a.dtype == np.uint16 or a.dtype.name == "bfloat16"
    return a.dtype == shape.numpy_dtype


def _rows_2d(dims, what, rows, cols):
    # [T, H], or [1, T, H] (a batch of one, as transformers returns it).
    if len(dims) == 3 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) != 2 or dims[0] != rows or dims[1] != cols:
        raise ShapeError("HS_ERR_SHAPE", "%s has shape %s; expected [%d, %d] (tokens, hidden)"
                         % (what, list(dims), rows, cols))


class LayerSource:
    """A [T, H] layer as the C API takes it."""

    def __init__(self, x, what, rows, shape):
        self.keep = x  # alive until the call returns (the copy is enqueued on its stream)
        if is_torch(x):
            if not _torch_dtype_ok(x, shape):
                raise ShapeError("HS_ERR_SHAPE", "%s is %s; the ring holds %s"
                                 % (what, x.dtype, shape.dtype))
            _rows_2d(tuple(x.shape), what, rows, shape.hidden_size)
            t = x.reshape(x.shape[-2], x.shape[-1]) if x.dim() == 3 else x
            if t.stride(1) != 1 and t.shape[1] > 1:
                t = t.contiguous()
            self.keep = t
            self.pointer = t.data_ptr()
            self.row_pitch = t.stride(0) * t.element_size() if t.shape[0] > 1 else 0
            self.device = t.is_cuda
            cuda = loaded_torch().cuda
            self.stream = cuda.current_stream(t.device).cuda_stream if t.is_cuda else None
            return
        if not isinstance(x, np.ndarray):
            raise ShapeError("HS_ERR_SHAPE", "%s is a %s: give a torch tensor or a numpy array"
                             % (what, type(x).__name__))
        if not _numpy_dtype_ok(x, shape):
            raise ShapeError("HS_ERR_SHAPE", "%s is %s; the ring holds %s%s"
                             % (what, x.dtype, shape.dtype,
                                " (numpy: its uint16 bits)" if shape.dtype == "bf16" else ""))
        _rows_2d(x.shape, what, rows, shape.hidden_size)
        a = x.reshape(x.shape[-2], x.shape[-1])
        if a.strides[1] != a.itemsize or a.strides[0] < 0:
            a = np.ascontiguousarray(a)
        self.keep = a
        self.pointer = a.ctypes.data
        self.row_pitch = a.strides[0] if a.shape[0] > 1 else 0
        self.device = False
        self.stream = None


def int32_host(x, what, count=None):
    """x as a contiguous int32 numpy array (a copy when needed: token arrays are small)."""
    if is_torch(x):
        x = x.detach().to("cpu").numpy()
    a = np.asarray(x)
    if a.ndim == 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ShapeError("HS_ERR_SHAPE", "%s must be a 1-D integer array, not %s of %s"
                         % (what, list(a.shape), a.dtype))
    if count is not None and a.shape[0] != count:
        raise ShapeError("HS_ERR_SHAPE", "%s has %d entries; expected %d" % (what, a.shape[0], count))
    return np.ascontiguousarray(a, dtype=np.int32)
