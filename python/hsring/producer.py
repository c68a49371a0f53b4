"""A target worker: hsring.Producer hands out jobs (a slot bound to a batch id, with its
tokens), the caller writes the captured layers and labels, then publishes."""

import ctypes
import os

from . import _env, _lib
from ._endpoint import Endpoint
from ._errors import ShapeError, StateError
from ._tensors import (c_index, c_name, current_stream_handle, int32_host, layer_parts,
                       loaded_torch)
from ._views import address_of, copy_of



class Job:
    """Batch `batch_id`, bound to a slot until published. `input_ids`, `positions` and
    `doc_offsets` are int32 views of the slot (cu_seqlens: num_docs + 1 entries).

    `loss_mask` (numpy bool [T], or None when the producer knows none: caller's or
    synthetic tokens) says where the label counts: False where the shard's loss mask
    leaves the next token out of training (chat data: the prompt's tokens), which
    write_labels stores as -100 whatever the model predicted there, as hsring's own
    target does. The last position of each document counts."""

    def __init__(self, producer, s):
        self._producer = producer
        self._ticket = s.ticket
        self.batch_id = s.batch_id
        self.slot = s.slot
        self.reproduced = bool(s.reproduced)
        self._struct = s
        self._published = False
        self._refresh()

    def _refresh(self):
        s = self._struct
        self.token_count = s.token_count
        self.num_docs = s.num_docs
        t, d = self.token_count, self.num_docs
        memory = self._producer._memory
        self.input_ids = memory.view(address_of(s.tokens), (t,), "int32")
        self.positions = memory.view(address_of(s.positions), (t,), "int32")
        self.doc_offsets = memory.view(address_of(s.doc_offsets), (d + 1,) if t else (0,), "int32")
        # A copy: the library's mask lives only until the job is published.
        mask = address_of(s.loss_mask)
        self.loss_mask = copy_of(mask, (t,), "uint8").astype(bool) if mask else None

    def _call(self, name, *args):
        if self._published:
            raise StateError("HS_ERR_STATE", "batch %d was published already" % self.batch_id)
        handle = self._producer._open_handle()
        return _lib.check(getattr(_lib.lib(), name)(handle, self._ticket, *args))

    def set_tokens(self, input_ids, positions=None, doc_offsets=None):
        """For a producer opened with caller_tokens=True: this batch's tokens (a pure
        function of batch_id), positions (default: 0.. per document) and cu_seqlens
        doc_offsets (default: one document)."""
        ids = int32_host(input_ids, "input_ids")
        n = ids.shape[0]
        offsets = int32_host(doc_offsets if doc_offsets is not None else [0, n], "doc_offsets")
        if positions is None:
            import numpy as np
            positions = np.concatenate([np.arange(offsets[i + 1] - offsets[i])
                                        for i in range(len(offsets) - 1)] or [np.zeros(0)])
        pos = int32_host(positions, "positions", n)
        self._call("hs_job_set_tokens", ids.ctypes.data, pos.ctypes.data, n,
                   offsets.ctypes.data, len(offsets) - 1)
        self._struct.token_count, self._struct.num_docs = n, len(offsets) - 1
        self._refresh()

    def write_layer(self, k, tensor):
        """Layer k ([T, H] or [1, T, H] of the ring's dtype): a CUDA tensor is copied on the
        current stream into the pinned slot (returns at once); host data is copied now."""
        p = self._producer
        if not 0 <= k < p.shape.num_layers:
            raise ShapeError("HS_ERR_SHAPE", "layer %d: the ring captures %d layers"
                             % (k, p.shape.num_layers))
        self._write(k, (tensor,))

    def write_layers(self, tensors):
        """All K captured layers, in the ring's layer order: one C call for all of them
        (CUDA tensors: K pitched copies enqueued on the current stream)."""
        if not isinstance(tensors, (list, tuple)):
            tensors = list(tensors)
        k = self._producer.shape.num_layers
        if len(tensors) != k:
            raise ShapeError("HS_ERR_SHAPE", "%d layers given; the ring captures %d"
                             % (len(tensors), k))
        self._write(0, tensors)

    def _write(self, first, tensors):
        # The critical path of a target (write_layers + publish): the producer's cached
        # functions and argument arrays, one C call for every layer.
        if self._published:
            raise StateError("HS_ERR_STATE", "batch %d was published already" % self.batch_id)
        p = self._producer
        handle = p._open_handle()
        shape, rows = p.shape, self.token_count
        sources, pitches = p._sources, p._pitches
        keep = []  # alive until the call returns (CUDA: the copies are enqueued by then)
        device = None
        for i, tensor in enumerate(tensors):
            kept, address, pitch, where = layer_parts(tensor, first + i, rows, shape,
                                                      p._torch_dtype)
            keep.append(kept)
            sources[i], pitches[i] = address, pitch
            if device is None:
                device = where
            elif where != device:
                raise ShapeError("HS_ERR_SHAPE", "layer %d is on %s, layer %d on %s: give "
                                 "every layer of a job from one device"
                                 % (first, _device_name(device), first + i, _device_name(where)))
        n = len(tensors)
        if device >= 0:
            status = p._copy_layers(handle, self._ticket, first, n, sources, pitches,
                                    current_stream_handle(device))
        else:
            status = p._write_layers(handle, self._ticket, first, n, sources, pitches)
        if status < 0:
            _lib.check(status)

    def write_labels(self, labels):
        """The target's label (its greedy next token) at each of the T positions; -100
        where it is not to be trained on. Where `loss_mask` is False the slot gets -100
        whatever is given."""
        a = int32_host(labels, "labels", self.token_count)
        self._call("hs_job_write_labels", a.ctypes.data, a.shape[0])

    def publish(self):
        """Makes the batch READY (after its device copies complete, on the library's
        publisher thread). Every layer, and on a model ring the labels, must be written."""
        if self._published:
            raise StateError("HS_ERR_STATE", "batch %d was published already" % self.batch_id)
        p = self._producer
        status = p._publish(p._open_handle(), self._ticket)
        if status < 0:
            _lib.check(status)
        self._published = True


def _device_name(index):
    return "cuda:%d" % index if index >= 0 else "the host"


class Producer(Endpoint):
    """Target `index` of ring `ring`. Iterating yields jobs until the run stops."""

    _ROLE = "producer"

    def __init__(self, ring, index, *, data_dir=None, data_seed=0, read_ahead=0,
                 caller_tokens=False, expected_epoch=0, lock_wait_ms=0, nnodes=1,
                 node_rank=0):
        options = _lib.ProducerOptions(
            data_dir=c_name(data_dir, "data_dir") if data_dir else None, data_seed=data_seed,
            read_ahead=read_ahead,
            tokens_from=_lib.HS_TOKENS_CALLER if caller_tokens else _lib.HS_TOKENS_AUTO,
            lock_wait_ms=lock_wait_ms, expected_epoch=expected_epoch, nnodes=nnodes,
            node_rank=node_rank)
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib().hs_producer_open(c_name(ring, "ring"), c_index(index, "index"),
                                               ctypes.byref(options), ctypes.byref(handle)))
        self._attach(handle, ring, index)
        # What write_layers and publish use on every batch, looked up once.
        lib = _lib.lib()
        self._write_layers = lib.hs_job_write_layers
        self._copy_layers = lib.hs_job_copy_layers_device
        self._publish = lib.hs_job_publish
        k = self.shape.num_layers
        self._sources = (ctypes.c_void_p * k)()
        self._pitches = (ctypes.c_uint64 * k)()
        torch = loaded_torch()
        self._torch_dtype = self.shape.torch_dtype if torch is not None else None

    @classmethod
    def from_env(cls, **kwargs):
        """The target `hsring run --target-cmd` started: HSRING_RING, HSRING_INDEX,
        HSRING_EPOCH and the run's data options (HSRING_DATA, HSRING_DATA_SEED, ...)."""
        ring, index, epoch = _env.place("target")
        kwargs.setdefault("data_dir", os.environ.get("HSRING_DATA") or None)
        kwargs.setdefault("data_seed", _env.env_int("HSRING_DATA_SEED"))
        kwargs.setdefault("read_ahead", _env.env_int("HSRING_READ_AHEAD"))
        kwargs.setdefault("nnodes", _env.env_int("HSRING_NNODES", 1))
        kwargs.setdefault("node_rank", _env.env_int("HSRING_NODE_RANK"))
        kwargs.setdefault("expected_epoch", epoch)
        _env.install_stop_handlers()
        return cls(ring, index, **kwargs)

    # The captured layers' ids, for building the model's capture (the rest of the shape:
    # Endpoint).
    layer_ids = property(lambda self: self.shape.layer_ids)

    def next_job(self, timeout=None):
        """The next job, or None when the run stops. timeout (seconds): None waits."""
        out = self._wait_next(_lib.lib().hs_producer_next_job, _lib.JobStruct, timeout,
                              "free slot")
        return None if out is None else Job(self, out)

    def __iter__(self):
        while True:
            job = self.next_job()
            if job is None:
                return
            yield job

    def flush(self):
        """Waits until every published job's device copies are done and it is READY."""
        _lib.check(_lib.lib().hs_producer_flush(self._open_handle()))
