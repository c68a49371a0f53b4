"""One Python exception per C API error status (include/hsring/hsring.h)."""


class HsringError(Exception):
    """A failed hsring call: ``status`` is the C status name, the message says why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class RingNotFoundError(HsringError, FileNotFoundError):
    """No ring of that name exists."""


class RingError(HsringError):
    """The ring was refused: not hsring's, another version, owner or mode."""


class BusyError(HsringError):
    """A live process holds this worker index (or another incarnation started)."""


class StateError(HsringError):
    """A call out of order: publish without a job, a double release, ..."""


class ShapeError(HsringError, ValueError):
    """A tensor's shape, dtype, device or values do not fit the ring."""


class LostSlotError(HsringError):
    """The slot was taken from this worker (it was presumed dead): exit and restart."""


class DataError(HsringError):
    """The token shards could not be read."""


class CudaError(HsringError):
    """A CUDA call failed."""


class UnsupportedError(HsringError):
    """A CUDA path in a libhsring built without CUDA."""


_BY_STATUS = {
    -1: ("HS_ERR_INVALID_ARGUMENT", ValueError),
    -2: ("HS_ERR_NOT_FOUND", RingNotFoundError),
    -3: ("HS_ERR_RING", RingError),
    -4: ("HS_ERR_BUSY", BusyError),
    -5: ("HS_ERR_STATE", StateError),
    -6: ("HS_ERR_SHAPE", ShapeError),
    -7: ("HS_ERR_LOST_SLOT", LostSlotError),
    -8: ("HS_ERR_DATA", DataError),
    -9: ("HS_ERR_CUDA", CudaError),
    -10: ("HS_ERR_UNSUPPORTED", UnsupportedError),
}


def error_for(status, message):
    """The exception for a negative status."""
    name, kind = _BY_STATUS.get(status, ("HS_ERR_INTERNAL", HsringError))
    if kind is ValueError:
        return _InvalidArgument(name, message)
    return kind(name, message)


class _InvalidArgument(HsringError, ValueError):
    pass
