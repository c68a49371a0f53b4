"""hsring: PyTorch (or numpy) targets and drafters on hsring's shared-memory ring.

A target::

    for job in hsring.Producer.from_env():
        hidden = model(job.input_ids)            # your forward
        job.write_layers([hidden[i] for i in layers])
        job.write_labels(greedy)
        job.publish()

A drafter::

    for batch in hsring.Consumer.from_env(device="cuda:0", noise_std=0.05):
        train_step(batch.hidden, batch.input_ids, batch.labels)

Both are numbered workers of the ring (liveness lock, epochs, recovery of what a crashed
predecessor left): run them with ``hsring run --target-cmd '...' --drafter-cmd '...'``.
The package is ctypes over libhsring.so, found through HSRING_LIB, beside the ``hsring``
binary on PATH, or in HSRING_BIN_DIR. ``hsring.write_shard`` writes token shards
(docs/data-format.md) from a tokenizer of one's own, ``hsring.read_shard`` reads one back;
they need numpy only. ``python3 -m hsring.prepare`` (``hsring data prepare``) turns chat
datasets into shards with a model's tokenizer and chat template (the ``data`` extra).
"""

from ._errors import (BusyError, CudaError, DataError, HsringError, LostSlotError,
                      RingError, RingNotFoundError, ShapeError, StateError,
                      UnsupportedError)
from ._lib import library_path
from .consumer import Batch, Consumer
from .producer import Job, Producer
from .shape import RingShape, ring_shape
from .shards import Shard, read_shard, write_shard

__all__ = [
    "Batch", "BusyError", "Consumer", "CudaError", "DataError", "HsringError", "Job",
    "LostSlotError", "Producer", "RingError", "RingNotFoundError", "RingShape",
    "ShapeError", "Shard", "StateError", "UnsupportedError", "library_path", "read_shard",
    "ring_shape", "write_shard",
]
