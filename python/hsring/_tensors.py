"""What a tensor argument is, for the C API: a host pointer with a row pitch, or a CUDA
device pointer with a row pitch and the stream it belongs to. numpy arrays and torch
tensors (CPU or CUDA) are accepted; anything else, or a wrong shape or dtype, is a
ShapeError naming what was expected."""

import os
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


def _numpy_dtype_ok(a, shape):
    if shape.dtype == "bf16":
        # Raw bits, or ml_dtypes' bfloat16 where installed.
        return a.dtype == np.uint16 or a.dtype.name == "bfloat16"
    return a.dtype == shape.numpy_dtype


def _shape_error(what, dims, rows, cols):
    return ShapeError("HS_ERR_SHAPE", "%s has shape %s; expected [%d, %d] (tokens, hidden)"
                      % (what, list(dims), rows, cols))


def layer_parts(x, k, rows, shape, torch_dtype):
    """Layer k ([T, H] or [1, T, H]) as the C API takes it: (the object to keep alive until
    the call returns, its address, its row pitch in bytes (0: dense), its CUDA device index
    or -1 for host memory). The hot path of write_layers: no allocation but the tuple, and
    the layer's name is formatted only for an error."""
    torch = loaded_torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if torch_dtype is None:  # torch was imported after the producer opened
            torch_dtype = shape.torch_dtype
        if x.dtype != torch_dtype:
            raise ShapeError("HS_ERR_SHAPE", "layer %d is %s; the ring holds %s"
                             % (k, x.dtype, shape.dtype))
        # [T, H], or [1, T, H] (a batch of one, as transformers returns it).
        dims = x.shape
        n = len(dims)
        if not (n == 2 or (n == 3 and dims[0] == 1)) or dims[-2] != rows \
                or dims[-1] != shape.hidden_size:
            raise _shape_error("layer %d" % k, tuple(dims), rows, shape.hidden_size)
        # Rows of a [1, T, H] tensor are its last two dimensions': no view needed. Rows that
        # overlap (an expand()ed row has stride 0) are no [T, H] the C API can read by pitch.
        strides = x.stride()
        if (strides[-1] != 1 and dims[-1] > 1) or (rows > 1 and strides[-2] < dims[-1]):
            x = x.contiguous()
            strides = x.stride()
        pitch = strides[-2] * shape.dtype_size if rows > 1 else 0
        return x, x.data_ptr(), pitch, (x.get_device() if x.is_cuda else -1)
    if not isinstance(x, np.ndarray):
        raise ShapeError("HS_ERR_SHAPE", "layer %d is a %s: give a torch tensor or a numpy array"
                         % (k, type(x).__name__))
    if not _numpy_dtype_ok(x, shape):
        raise ShapeError("HS_ERR_SHAPE", "layer %d is %s; the ring holds %s%s"
                         % (k, x.dtype, shape.dtype,
                            " (numpy: its uint16 bits)" if shape.dtype == "bf16" else ""))
    dims = x.shape
    n = len(dims)
    if not (n == 2 or (n == 3 and dims[0] == 1)) or dims[-2] != rows \
            or dims[-1] != shape.hidden_size:
        raise _shape_error("layer %d" % k, dims, rows, shape.hidden_size)
    # Rows must not overlap: np.broadcast_to(row, (T, H)) has a row stride of 0, and read by
    # its pitch it would be T rows of memory past the H values it holds.
    strides = x.strides
    if strides[-1] != x.itemsize or (rows > 1 and strides[-2] < dims[-1] * x.itemsize):
        x = np.ascontiguousarray(x)
        strides = x.strides
    pitch = strides[-2] if rows > 1 else 0
    return x, x.ctypes.data, pitch, -1


def current_stream_handle(device_index):
    """The cudaStream_t of torch's current stream on that device, as an int. torch's own
    raw accessor where it has one (a few hundred ns), else the public, slower way."""
    torch = loaded_torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def int32_host(x, what, count=None):
    """x as a contiguous int32 numpy array (a copy when needed: token arrays are small). A
    value int32 cannot hold is a ShapeError, never wrapped."""
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
    if a.size and (a.dtype.itemsize > 4 or a.dtype == np.uint32):
        low, high = int(a.min()), int(a.max())
        if low < INT32_MIN or high > INT32_MAX:
            bad = low if low < INT32_MIN else high
            raise ShapeError("HS_ERR_SHAPE", "%s holds %d (at %d), outside int32"
                             % (what, bad, int(np.argmax(a == bad))))
    return np.ascontiguousarray(a, dtype=np.int32)


def c_index(index, what):
    """A worker index as the C API's uint32: an int in range, never wrapped."""
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise TypeError("%s must be an int, not %s" % (what, type(index).__name__))
    if not 0 <= int(index) < (1 << 32):
        raise ValueError("%s %d is outside [0, 2^32)" % (what, int(index)))
    return int(index)


def c_name(name, what):
    """A name or path as the C API's NUL-terminated string: one with a NUL inside would be
    cut there."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise TypeError("%s must be a str, not %s" % (what, type(name).__name__))
    if "\0" in name:
        raise ValueError("%s %r holds a NUL character" % (what, name))
    return name.encode()
