"""Loading libhsring.so and declaring its C API (include/hsring/hsring.h) for ctypes."""

import ctypes
import os
import shutil

from ._errors import error_for

HS_OK, HS_STOPPED, HS_TIMEOUT = 0, 1, 2
HS_TOKENS_AUTO, HS_TOKENS_CALLER = 0, 1
MAX_LAYERS = 16
API_VERSION = 3


class ShapeStruct(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in (
        "slot_count", "max_tokens", "hidden_size", "num_layers", "dtype", "dtype_size",
        "split_layers", "num_targets", "num_drafters", "hs_min_ready", "content",
        "vocab_size")] + [("layer_ids", ctypes.c_int32 * MAX_LAYERS),
                          ("batch_limit", ctypes.c_uint64)]


class ProducerOptions(ctypes.Structure):
    _fields_ = [("data_dir", ctypes.c_char_p), ("data_seed", ctypes.c_uint64),
                ("read_ahead", ctypes.c_uint32), ("tokens_from", ctypes.c_uint32),
                ("lock_wait_ms", ctypes.c_uint32), ("expected_epoch", ctypes.c_uint32),
                ("nnodes", ctypes.c_uint32), ("node_rank", ctypes.c_uint32)]


_I32P = ctypes.POINTER(ctypes.c_int32)


class JobStruct(ctypes.Structure):
    _fields_ = [("ticket", ctypes.c_uint64), ("batch_id", ctypes.c_uint64),
                ("slot", ctypes.c_uint32), ("token_count", ctypes.c_uint32),
                ("num_docs", ctypes.c_uint32), ("reproduced", ctypes.c_uint32),
                ("tokens", _I32P), ("positions", _I32P), ("doc_offsets", _I32P),
                ("labels", _I32P), ("loss_mask", ctypes.POINTER(ctypes.c_uint8))]


class ConsumerOptions(ctypes.Structure):
    _fields_ = [("lock_wait_ms", ctypes.c_uint32), ("expected_epoch", ctypes.c_uint32),
                ("seed", ctypes.c_uint64)]


class BatchStruct(ctypes.Structure):
    _fields_ = [("ticket", ctypes.c_uint64), ("batch_id", ctypes.c_uint64),
                ("slot", ctypes.c_uint32), ("token_count", ctypes.c_uint32),
                ("num_docs", ctypes.c_uint32), ("length_bucket", ctypes.c_uint32),
                ("tokens", _I32P), ("positions", _I32P), ("doc_offsets", _I32P),
                ("labels", _I32P), ("layers", ctypes.c_void_p * MAX_LAYERS),
                ("layer_row_pitch", ctypes.c_uint64)]


def _candidates():
    env = os.environ.get("HSRING_LIB")
    if env:
        yield env
    for folder in (os.environ.get("HSRING_BIN_DIR"),
                   os.path.dirname(shutil.which("hsring") or "") or None,
                   os.path.dirname(os.path.abspath(__file__))):
        if folder:
            yield os.path.join(folder, "libhsring.so")


def library_path():
    """Where libhsring.so is: HSRING_LIB, HSRING_BIN_DIR, beside `hsring` on PATH, or here."""
    tried = []
    for path in _candidates():
        if os.path.isfile(path):
            return path
        tried.append(path)
    raise ImportError("libhsring.so not found (tried: %s): set HSRING_LIB to its path, or put "
                      "the folder of the hsring binary on PATH" % (", ".join(tried) or "nothing"))


def _declare(lib):
    c = ctypes
    vp, u32, u64 = c.c_void_p, c.c_uint32, c.c_uint64
    sigs = {
        "hs_last_error": (c.c_char_p, []),
        "hs_api_version": (c.c_int, []),
        "hs_has_cuda": (c.c_int, []),
        "hs_request_stop": (None, []),
        "hs_ring_shape_of": (c.c_int, [c.c_char_p, c.POINTER(ShapeStruct)]),
        "hs_producer_open": (c.c_int, [c.c_char_p, u32, c.POINTER(ProducerOptions),
                                       c.POINTER(vp)]),
        "hs_producer_close": (c.c_int, [vp]),
        "hs_producer_shape": (c.c_int, [vp, c.POINTER(ShapeStruct)]),
        "hs_producer_epoch": (u32, [vp]),
        "hs_producer_segment": (c.c_int, [vp, c.POINTER(vp), c.POINTER(u64), c.POINTER(c.c_int)]),
        "hs_producer_next_job": (c.c_int, [vp, u32, c.POINTER(JobStruct)]),
        "hs_job_set_tokens": (c.c_int, [vp, u64, vp, vp, u32, vp, u32]),
        "hs_job_write_layer": (c.c_int, [vp, u64, u32, vp, u64]),
        "hs_job_write_layers": (c.c_int, [vp, u64, u32, u32, c.POINTER(vp), c.POINTER(u64)]),
        "hs_job_copy_layers_device": (c.c_int, [vp, u64, u32, u32, c.POINTER(vp),
                                                c.POINTER(u64), vp]),
        "hs_job_write_labels": (c.c_int, [vp, u64, vp, u32]),
        "hs_job_publish": (c.c_int, [vp, u64]),
        "hs_job_copy_layer_device": (c.c_int, [vp, u64, u32, vp, u64, vp]),
        "hs_producer_flush": (c.c_int, [vp]),
        "hs_consumer_open": (c.c_int, [c.c_char_p, u32, c.POINTER(ConsumerOptions),
                                       c.POINTER(vp)]),
        "hs_consumer_close": (c.c_int, [vp]),
        "hs_consumer_shape": (c.c_int, [vp, c.POINTER(ShapeStruct)]),
        "hs_consumer_epoch": (u32, [vp]),
        "hs_consumer_segment": (c.c_int, [vp, c.POINTER(vp), c.POINTER(u64), c.POINTER(c.c_int)]),
        "hs_consumer_next": (c.c_int, [vp, u32, c.POINTER(BatchStruct)]),
        "hs_consumer_release": (c.c_int, [vp, u64]),
        "hs_consumer_copy_to_device": (c.c_int, [vp, u64, vp, u64, vp, c.c_float, u64, u64]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_lib = None


def lib():
    """The loaded library (loaded on first use, so `import hsring` needs none)."""
    global _lib
    if _lib is None:
        loaded = _declare(ctypes.CDLL(library_path()))
        if loaded.hs_api_version() != API_VERSION:
            raise ImportError("libhsring.so speaks C API version %d; this package speaks %d"
                              % (loaded.hs_api_version(), API_VERSION))
        _lib = loaded
    return _lib


def check(status):
    """Returns a non-error status; raises the matching exception for an error."""
    if status < 0:
        message = lib().hs_last_error().decode("utf-8", "replace")
        raise error_for(status, message)
    return status
