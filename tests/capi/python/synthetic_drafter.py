"""A Python drafter for a synthetic ring fed by hsring's C++ targets: checks every element
of every batch against hsring's synthetic function; exits 5 (torn, as hsring-drafter
reports it) on a mismatch."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hsring  # noqa: E402
from synthetic import layer_array  # noqa: E402

consumer = hsring.Consumer.from_env()
shape = consumer.shape
for batch in consumer:
    for k, layer in enumerate(batch.layers):
        expected = layer_array(shape, batch.batch_id, k, batch.token_count)
        if not np.array_equal(layer.view(expected.dtype), expected):
            print("TORN batch %d layer %d" % (batch.batch_id, k), flush=True)
            sys.exit(5)
consumer.close()
