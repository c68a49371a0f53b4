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
(docs/data-format.md) from a tokenizer of one's own; it needs numpy only.
"""

from ._errors import (BusyError, CudaError, DataError, HsringError, LostSlotError,
                      RingError, RingNotFoundError, ShapeError, StateError,
                      UnsupportedError)
from ._lib import library_path
from .consumer import Batch, Consumer
from .producer import Job, Producer
from .shape import RingShape, ring_shape
from .shards import write_shard

__all__ = [
    "Batch", "BusyError", "Consumer", "CudaError", "DataError", "HsringError", "Job",
    "LostSlotError", "Producer", "RingError", "RingNotFoundError", "RingShape",
    "ShapeError", "StateError", "UnsupportedError", "library_path", "ring_shape",
    "write_shard",
]
