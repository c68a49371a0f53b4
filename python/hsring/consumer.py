"""A drafter worker: hsring.Consumer claims random READY batches (after hs_min_ready) and
hands out zero-copy views of the slot, or the hidden states on a GPU as [T, K*H]."""

import ctypes
import warnings

import numpy as np

from . import _env, _lib
from ._endpoint import Endpoint
from ._errors import StateError
from ._tensors import c_index, c_name, import_torch, loaded_torch
from ._views import address_of


class Batch:
    """A claimed batch. On the CPU every array is a read-only view of the slot, valid until
    release(); on a GPU `hidden` is a tensor of its own and the slot is already released."""

    def __init__(self, consumer, s):
        self._consumer = consumer
        self._ticket = s.ticket
        self._released = False
        shape, memory = consumer.shape, consumer._memory
        t, d = s.token_count, s.num_docs
        self.batch_id = s.batch_id
        self.slot = s.slot
        self.token_count = t
        self.num_docs = d
        self.length_bucket = s.length_bucket
        self.input_ids = memory.view(address_of(s.tokens), (t,), "int32")
        self.positions = memory.view(address_of(s.positions), (t,), "int32")
        self.doc_offsets = memory.view(address_of(s.doc_offsets), (d + 1,), "int32")
        self.labels = memory.view(address_of(s.labels), (t,), "int32")
        item = shape.dtype_size
        self._memory, self._first_layer = memory, s.layers[0]
        self.layers = [memory.view(s.layers[k], (t, shape.hidden_size), shape.numpy_dtype,
                                   strides=(s.layer_row_pitch, item))
                       for k in range(shape.num_layers)]
        self._hidden = None

    def hidden_numpy(self):
        """[T, K*H] of the ring's numpy dtype: a view when the ring stores the layers
        concatenated, else a copy (bf16: uint16 bits)."""
        shape = self._consumer.shape
        if not shape.split_layers:
            return self._memory.view(self._first_layer,
                                     (self.token_count, shape.num_layers * shape.hidden_size),
                                     shape.numpy_dtype)
        return np.concatenate(self.layers, axis=1)

    @property
    def hidden(self):
        """[T, K*H]: a torch tensor on the consumer's device when it has one (noise added),
        else a torch CPU tensor when torch is imported, else numpy."""
        if self._hidden is None:
            array = self.hidden_numpy()
            torch = loaded_torch()
            if torch is None:
                return array
            with warnings.catch_warnings():  # read-only on purpose: a view of the slot
                warnings.simplefilter("ignore", UserWarning)
                t = torch.from_numpy(array)
            self._hidden = t.view(torch.bfloat16) if self._consumer.shape.dtype == "bf16" else t
        return self._hidden

    def release(self):
        """Marks the batch consumed and frees the slot. A second release is a StateError."""
        if self._released:
            raise StateError("HS_ERR_STATE", "batch %d was released already" % self.batch_id)
        handle = self._consumer._open_handle()
        self._released = True
        _lib.check(_lib.lib().hs_consumer_release(handle, self._ticket))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._released:
            self.release()


class Consumer(Endpoint):
    """Drafter `index` of ring `ring`. Iterating yields batches until the run stops; each
    one is released when the next is asked for (or by batch.release())."""

    _ROLE = "consumer"

    def __init__(self, ring, index, *, device=None, noise_std=0.0, seed=0, expected_epoch=0,
                 lock_wait_ms=0):
        options = _lib.ConsumerOptions(lock_wait_ms=lock_wait_ms, expected_epoch=expected_epoch,
                                       seed=seed)
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib().hs_consumer_open(c_name(ring, "ring"), c_index(index, "index"),
                                               ctypes.byref(options), ctypes.byref(handle)))
        self._attach(handle, ring, index)
        self.device = None
        if device is not None and str(device) != "cpu":
            torch = import_torch()
            if torch is None:
                raise RuntimeError("device=%r needs torch" % (device,))
            self.device = torch.device(device)
        self.noise_std = float(noise_std)
        self.seed = seed
        self._step = 0

    @classmethod
    def from_env(cls, **kwargs):
        """The drafter `hsring run --drafter-cmd` started (HSRING_RING, HSRING_INDEX,
        HSRING_EPOCH; its GPU is cuda:0 under CUDA_VISIBLE_DEVICES)."""
        ring, index, epoch = _env.place("drafter")
        kwargs.setdefault("expected_epoch", epoch)
        _env.install_stop_handlers()
        return cls(ring, index, **kwargs)

    def next_batch(self, timeout=None):
        """The next batch, or None when the run stops. timeout (seconds): None waits."""
        out = self._wait_next(_lib.lib().hs_consumer_next, _lib.BatchStruct, timeout, "batch")
        if out is None:
            return None
        batch = Batch(self, out)
        if self.device is not None:
            self._to_device(batch)
        return batch

    def _to_device(self, batch):
        # The pitched [T, K*H] assembly (and noise) of hsring's GPU drafter; the slot is
        # released as soon as the copy has landed, so targets refill it during the step.
        shape = self.shape
        torch = loaded_torch()
        hidden = torch.empty((batch.token_count, shape.num_layers * shape.hidden_size),
                             dtype=shape.torch_dtype, device=self.device)
        stream = torch.cuda.current_stream(self.device).cuda_stream
        _lib.check(_lib.lib().hs_consumer_copy_to_device(
            self._handle, batch._ticket, hidden.data_ptr(), hidden.numel() * hidden.element_size(),
            stream, self.noise_std, self.seed, self._step))
        self._step += 1
        metadata = [a.copy() for a in (batch.input_ids, batch.positions, batch.doc_offsets,
                                       batch.labels)]
        batch.release()
        batch.input_ids, batch.positions, batch.doc_offsets, batch.labels = [
            torch.from_numpy(a).to(self.device) for a in metadata]
        batch.layers = []
        batch._hidden = hidden

    def __iter__(self):
        previous = None
        while True:
            if previous is not None and not previous._released:
                previous.release()
            batch = self.next_batch()
            if batch is None:
                return
            previous = batch
            yield batch
