"""Zero-copy numpy views of slot memory (the ring is mapped in this process)."""

import ctypes

import numpy as np


def view(address, shape, dtype, strides=None, writable=False):
    dtype = np.dtype(dtype)
    if strides is None:
        nbytes = int(np.prod(shape)) * dtype.itemsize
    else:
        nbytes = sum((n - 1) * s for n, s in zip(shape, strides)) + dtype.itemsize
    if nbytes <= 0 or address is None:
        return np.empty(shape, dtype)
    buffer = (ctypes.c_char * nbytes).from_address(address)
    array = np.ndarray(shape, dtype, buffer=buffer, strides=strides)
    array.flags.writeable = writable
    return array


def address_of(pointer):
    return ctypes.cast(pointer, ctypes.c_void_p).value
