"""Zero-copy numpy views of slot memory. They are views of the package's own read-only
mapping of the ring, not of the C handle's: numpy keeps that mapping alive as long as any
view (or a torch tensor made from one) exists, so a view read after Producer.close() or
Consumer.close() reads the ring's memory as it is now, never unmapped memory."""

import ctypes
import mmap
import os

import numpy as np


class SegmentMemory:
    """The ring segment mapped read-only, and where the C handle maps it (`base`), so an
    address the handle hands out becomes an offset into this mapping."""

    def __init__(self, base, size, fd):
        try:
            self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        finally:
            os.close(fd)  # the mapping holds the segment
        self._base, self._size = base, size

    def view(self, address, shape, dtype, strides=None):
        """A read-only array at `address` of the handle's mapping. An address outside the
        ring (the library's own memory) is a ValueError: it would not be kept alive."""
        dtype = np.dtype(dtype)
        extent = _extent(shape, dtype, strides)
        if extent <= 0 or address is None:
            return np.empty(shape, dtype)
        offset = address - self._base
        if offset < 0 or offset + extent > self._size:
            raise ValueError("address %#x (+%d bytes) is outside the ring's %d bytes at %#x"
                             % (address, extent, self._size, self._base))
        return np.ndarray(shape, dtype, buffer=self._map, offset=offset, strides=strides)


def _extent(shape, dtype, strides):
    if strides is None:
        return int(np.prod(shape)) * dtype.itemsize
    if any(n == 0 for n in shape):
        return 0
    return sum((n - 1) * s for n, s in zip(shape, strides)) + dtype.itemsize


def copy_of(address, shape, dtype):
    """A copy of memory the library owns (not the ring's): read once, at once."""
    dtype = np.dtype(dtype)
    nbytes = _extent(shape, dtype, None)
    if nbytes <= 0 or address is None:
        return np.empty(shape, dtype)
    buffer = (ctypes.c_char * nbytes).from_address(address)
    return np.frombuffer(buffer, dtype).reshape(shape).copy()


def address_of(pointer):
    return ctypes.cast(pointer, ctypes.c_void_p).value
