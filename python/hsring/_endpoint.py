"""What hsring.Producer and hsring.Consumer share: an open C handle of one worker (role
`_ROLE`), the ring's shape read from it, the polling wait of next_job / next_batch, and
closing (explicitly, by `with`, or when collected)."""

import ctypes

from . import _lib
from ._errors import StateError
from ._views import SegmentMemory
from .shape import from_struct

_POLL_MS = 100  # each wait returns this often, so Python's signal handlers run


class Endpoint:
    _ROLE = None  # "producer" or "consumer": the prefix of the C functions (hs_<role>_*)

    def _attach(self, handle, ring, index):
        """Takes ownership of the opened `handle` of worker `index` on `ring`."""
        self._handle = handle
        self.ring, self.index = ring, index
        s = _lib.ShapeStruct()
        _lib.check(self._c("shape")(handle, ctypes.byref(s)))
        self.shape = from_struct(s)
        self.epoch = self._c("epoch")(handle)
        base, size, fd = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_int(-1)
        _lib.check(self._c("segment")(handle, ctypes.byref(base), ctypes.byref(size),
                                      ctypes.byref(fd)))
        # Jobs' and batches' views are of this mapping: they may outlive the handle.
        self._memory = SegmentMemory(base.value, size.value, fd.value)

    def _open_handle(self):
        """The C handle; a StateError once closed (the C API would only say NULL)."""
        if self._handle is None:
            raise StateError("HS_ERR_STATE", "the %s is closed" % self._ROLE)
        return self._handle

    def _c(self, name):
        return getattr(_lib.lib(), "hs_%s_%s" % (self._ROLE, name))

    # The ring's shape.
    num_layers = property(lambda self: self.shape.num_layers)
    hidden_size = property(lambda self: self.shape.hidden_size)
    vocab_size = property(lambda self: self.shape.vocab_size)
    max_tokens = property(lambda self: self.shape.max_tokens)
    dtype = property(lambda self: self.shape.dtype)

    def _wait_next(self, call, struct_type, timeout, waiting_for):
        """Calls `call(handle, wait_ms, out)` in waits of _POLL_MS until it gives HS_OK
        (returns the filled struct) or HS_STOPPED (returns None); TimeoutError after
        `timeout` seconds (None: no limit) naming `waiting_for`."""
        remaining = None if timeout is None else max(0, int(timeout * 1000))
        while True:
            handle = self._open_handle()
            wait = _POLL_MS if remaining is None else min(_POLL_MS, remaining)
            out = struct_type()
            status = _lib.check(call(handle, wait, ctypes.byref(out)))
            if status == _lib.HS_OK:
                return out
            if status == _lib.HS_STOPPED:
                return None
            if remaining is not None:
                remaining -= wait
                if remaining <= 0:
                    raise TimeoutError("no %s within %s s" % (waiting_for, timeout))

    def close(self):
        """Ends the worker. Views of its jobs or batches stay readable (they keep their
        mapping of the ring) but see whatever the slot holds from then on."""
        if getattr(self, "_handle", None) is not None:
            handle, self._handle = self._handle, None
            self._memory = None  # unmapped once the last view is gone
            _lib.check(self._c("close")(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
