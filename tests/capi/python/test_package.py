"""python/hsring against libhsring.so: a round trip through numpy and torch, the shape
attributes, and bad input as clear Python exceptions that leave the ring consistent."""

import numpy as np
import pytest

import hsring
from synthetic import layer_array

torch = pytest.importorskip("torch")


def produce_one(producer):
    job = producer.next_job(timeout=5)
    shape = producer.shape
    job.write_layers([layer_array(shape, job.batch_id, k, job.token_count)
                      for k in range(shape.num_layers)])
    job.publish()
    return job


def test_round_trip_numpy_views(make_ring):
    ring = make_ring()
    with hsring.Producer(ring.name, 0) as producer, hsring.Consumer(ring.name, 0) as consumer:
        assert (producer.num_layers, producer.hidden_size, producer.dtype) == (3, 16, "fp32")
        assert producer.max_tokens == 32
        for expected_id in range(4):
            job = produce_one(producer)
            assert job.batch_id == expected_id
            batch = consumer.next_batch(timeout=5)
            assert batch.batch_id == job.batch_id
            assert batch.token_count == job.token_count
            np.testing.assert_array_equal(batch.input_ids, job.input_ids)
            assert batch.doc_offsets[0] == 0 and batch.doc_offsets[-1] == batch.token_count
            for k, layer in enumerate(batch.layers):
                np.testing.assert_array_equal(
                    layer, layer_array(producer.shape, batch.batch_id, k, batch.token_count))
            assert not batch.layers[0].flags.writeable  # views of the slot, read-only
            hidden = batch.hidden_numpy()
            assert hidden.shape == (batch.token_count, 3 * 16)
            batch.release()
            with pytest.raises(hsring.StateError, match="released already"):
                batch.release()


def test_torch_bf16_round_trip_concatenated_layout(make_ring):
    ring = make_ring(dtype="bf16", split_fc_layers=False)
    with hsring.Producer(ring.name, 0) as producer, hsring.Consumer(ring.name, 0) as consumer:
        job = producer.next_job(timeout=5)
        layers = [torch.randn(job.token_count, 16).to(torch.bfloat16) for _ in range(3)]
        # A [1, T, H] tensor (as transformers returns it) and a strided row view work too.
        wide = torch.randn(job.token_count, 32).to(torch.bfloat16)
        layers[1] = wide[:, :16]
        layers[2] = layers[2].unsqueeze(0)
        job.write_layers(layers)
        job.publish()
        batch = consumer.next_batch(timeout=5)
        assert batch.hidden.dtype == torch.bfloat16
        expected = torch.cat([layers[0], layers[1], layers[2][0]], dim=1)
        assert torch.equal(batch.hidden, expected)
        batch.release()


def test_bad_input_is_a_clear_exception_and_the_ring_stays_consistent(make_ring):
    with pytest.raises(hsring.RingNotFoundError, match="no-such-ring"):
        hsring.Producer("hsring-pytest-no-such-ring", 0)
    ring = make_ring()
    with pytest.raises(ValueError, match="does not exist"):
        hsring.Producer(ring.name, 3)
    with hsring.Producer(ring.name, 0) as producer, hsring.Consumer(ring.name, 0) as consumer:
        with pytest.raises(hsring.BusyError, match="already running"):
            hsring.Producer(ring.name, 0, lock_wait_ms=20)
        job = producer.next_job(timeout=5)
        t = job.token_count
        with pytest.raises(hsring.ShapeError, match=r"expected \[%d, 16\]" % t):
            job.write_layer(0, np.zeros((t, 15), np.float32))
        with pytest.raises(hsring.ShapeError, match="the ring holds fp32"):
            job.write_layer(0, np.zeros((t, 16), np.float64))
        with pytest.raises(hsring.ShapeError, match="the ring holds fp32"):
            job.write_layer(0, torch.zeros(t, 16, dtype=torch.float16))
        with pytest.raises(hsring.ShapeError, match="captures 3"):
            job.write_layers([np.zeros((t, 16), np.float32)] * 2)
        with pytest.raises(hsring.ShapeError, match="entries"):
            job.write_labels(np.zeros(t + 1, np.int32))
        with pytest.raises(hsring.StateError, match="never written"):
            job.publish()  # publish before the layers are written
        with pytest.raises(hsring.ShapeError, match="torch tensor or a numpy array"):
            job.write_layer(0, [[0.0] * 16] * t)
        # After all that, the same job publishes correctly and a drafter verifies it.
        job.write_layers([layer_array(producer.shape, job.batch_id, k, t) for k in range(3)])
        job.publish()
        with pytest.raises(hsring.StateError, match="published already"):
            job.publish()
        batch = consumer.next_batch(timeout=5)
        assert batch.batch_id == job.batch_id
        for k, layer in enumerate(batch.layers):
            np.testing.assert_array_equal(layer, layer_array(producer.shape, batch.batch_id, k, t))
        batch.release()


def test_shape_of_a_ring(make_ring):
    ring = make_ring(hidden_size=24, num_layers=2, dtype="fp16")
    shape = hsring.ring_shape(ring.name)
    assert (shape.hidden_size, shape.num_layers, shape.dtype, shape.content) == (24, 2, "fp16", "synthetic")
    assert shape.numpy_dtype == np.float16 and shape.torch_dtype == torch.float16


def test_loss_mask_of_the_shards_masks_the_labels(make_ring, tmp_path):
    # Shards whose mask counts exactly the even tokens: whatever the packing, the label at
    # t counts when t is its document's last position or token t + 1 is even.
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 256, n) for n in (5, 40, 17, 60, 9, 33, 21)]
    hsring.write_shard(tmp_path / "shard-00000.hstok", docs,
                       loss_masks=[(d % 2 == 0).astype(np.int64) for d in docs], vocab_size=256)
    ring = make_ring(model="tiny", data=str(tmp_path), max_tokens=48, dtype="fp32",
                     hidden_size=None)
    checked = 0
    with hsring.Producer(ring.name, 0, data_dir=str(tmp_path)) as producer, \
            hsring.Consumer(ring.name, 0) as consumer:
        shape = producer.shape
        for _ in range(4):
            job = producer.next_job(timeout=5)
            t, offsets, ids = job.token_count, job.doc_offsets, job.input_ids
            expected = np.ones(t, bool)
            for d in range(job.num_docs):
                s, e = int(offsets[d]), int(offsets[d + 1])
                expected[s:e - 1] = ids[s + 1:e] % 2 == 0
            assert job.loss_mask is not None and job.loss_mask.dtype == bool
            np.testing.assert_array_equal(job.loss_mask, expected)
            assert not expected.all() and expected.any()
            with pytest.raises(hsring.ShapeError, match="not -100"):
                job.write_labels(np.full(t, -5, np.int32))
            # The model's greedy labels (here 7 everywhere, -100 at the first position):
            # masked positions become -100 whatever was given; -100 is accepted anywhere.
            given = np.full(t, 7, np.int32)
            given[0] = -100
            job.write_labels(given)
            job.write_layers([np.zeros((t, shape.hidden_size), np.float32)] * shape.num_layers)
            job.publish()
            batch = consumer.next_batch(timeout=5)
            want = np.where(expected, 7, -100)
            want[0] = -100
            np.testing.assert_array_equal(batch.labels, want)
            batch.release()
            checked += 1
    assert checked == 4


def test_caller_tokens_have_no_loss_mask_and_take_minus_100(make_ring):
    ring = make_ring(model="tiny", max_tokens=16, dtype="fp32", hidden_size=None)
    with hsring.Producer(ring.name, 0, caller_tokens=True) as producer, \
            hsring.Consumer(ring.name, 0) as consumer:
        job = producer.next_job(timeout=5)
        job.set_tokens(np.arange(10, 20), doc_offsets=[0, 4, 10])
        assert job.loss_mask is None
        job.write_labels([1, 2, 3, -100, 5, 6, 7, 8, 9, -100])
        job.write_layers([np.ones((10, producer.hidden_size), np.float32)] * producer.num_layers)
        job.publish()
        batch = consumer.next_batch(timeout=5)
        assert batch.labels.tolist() == [1, 2, 3, -100, 5, 6, 7, 8, 9, -100]
        batch.release()


def test_write_layers_is_one_call_and_all_or_nothing(make_ring):
    ring = make_ring()
    with hsring.Producer(ring.name, 0) as producer, hsring.Consumer(ring.name, 0) as consumer:
        job = producer.next_job(timeout=5)
        t, shape = job.token_count, producer.shape
        good = [layer_array(shape, job.batch_id, k, t) for k in range(3)]
        # Layer 2 is wrong: nothing is written, so the publish names layer 0 as missing.
        with pytest.raises(hsring.ShapeError, match=r"layer 2 has shape"):
            job.write_layers(good[:2] + [np.zeros((t, 8), np.float32)])
        with pytest.raises(hsring.StateError, match="layer 0 of batch"):
            job.publish()
        # A [1, T, H] numpy array, a strided view and a torch tensor in one call.
        wide = np.zeros((t, 32), np.float32)
        wide[:, 3:19] = good[1]
        job.write_layers([good[0][None], wide[:, 3:19], torch.from_numpy(good[2])])
        job.publish()
        batch = consumer.next_batch(timeout=5)
        for k in range(3):
            np.testing.assert_array_equal(batch.layers[k], good[k])
        batch.release()


def test_values_the_c_api_cannot_hold_are_refused_not_wrapped(make_ring):
    ring = make_ring()
    with pytest.raises(ValueError, match="outside"):
        hsring.Producer(ring.name, 1 << 40)  # would wrap to target 0
    with pytest.raises(ValueError, match="NUL"):
        hsring.Producer(ring.name + "\0tail", 0)  # would be cut to the real ring's name
    with pytest.raises(TypeError, match="int"):
        hsring.Consumer(ring.name, 0.0)
    with hsring.Producer(ring.name, 0) as producer, hsring.Consumer(ring.name, 0) as consumer:
        job = producer.next_job(timeout=5)
        t = job.token_count
        with pytest.raises(hsring.ShapeError, match="outside int32"):
            job.write_labels(np.full(t, 1 << 40, np.int64))  # would be stored as 0
        # A broadcast row (row stride 0) is copied into T rows, not read past its H values.
        rows = [np.broadcast_to(layer_array(producer.shape, job.batch_id, k, t)[0], (t, 16))
                for k in range(3)]
        job.write_layers(rows)
        job.publish()
        batch = consumer.next_batch(timeout=5)
        for k, layer in enumerate(batch.layers):
            np.testing.assert_array_equal(layer, rows[k])
        batch.release()


def test_broadcast_torch_rows_are_copied_too(make_ring):
    ring = make_ring()
    with hsring.Producer(ring.name, 0) as producer, hsring.Consumer(ring.name, 0) as consumer:
        job = producer.next_job(timeout=5)
        t = job.token_count
        row = torch.arange(16, dtype=torch.float32)
        job.write_layers([row.expand(t, 16) + k for k in range(2)] + [row.expand(t, 16)])
        job.publish()
        batch = consumer.next_batch(timeout=5)
        np.testing.assert_array_equal(batch.layers[2], np.broadcast_to(np.arange(16.0), (t, 16)))
        batch.release()


# Run in a child: before views kept their mapping, reading one after close was a SIGSEGV,
# which would take pytest down with it.
_VIEWS_AFTER_CLOSE = r"""
import subprocess, sys
import numpy as np
import torch
import hsring
from synthetic import layer_array

ring, hsring_bin = sys.argv[1], sys.argv[2]
producer = hsring.Producer(ring, 0)
consumer = hsring.Consumer(ring, 0)
job = producer.next_job(timeout=5)
shape = producer.shape
expected = [layer_array(shape, job.batch_id, k, job.token_count) for k in range(3)]
job.write_layers(expected)
job.publish()
tokens = job.input_ids.copy()
ids = job.input_ids
batch = consumer.next_batch(timeout=5)
layers, hidden, labels = batch.layers, batch.hidden, batch.labels
unpublished = producer.next_job(timeout=5)
producer.close()
consumer.close()
for late in (unpublished.publish, batch.release, producer.flush):
    try:
        late()
        raise SystemExit("%s after close did not raise" % late)
    except hsring.StateError as e:
        assert "closed" in str(e), e
assert (ids == tokens).all() and (batch.input_ids == tokens).all()
for k in range(3):
    assert (layers[k] == expected[k]).all()
assert torch.equal(hidden, torch.from_numpy(np.concatenate(expected, axis=1)))
# The views hold no worker's liveness: the index opens again at once.
again = hsring.Producer(ring, 0, lock_wait_ms=1)
again.close()
# Nor the ring's name: removed, it is still readable through the views.
subprocess.run([hsring_bin, "ring", "remove", "--force", ring], check=True, capture_output=True)
assert (ids == tokens).all() and (layers[2] == expected[2]).all() and labels.shape == ids.shape
try:
    ids[0] = 1
    raise SystemExit("a view of the ring was writable")
except ValueError:
    pass
del job, unpublished, batch, ids, layers, hidden, labels
import gc
gc.collect()
assert ring not in open("/proc/self/maps").read(), "the mapping outlived its views"
print("views outlived close")
"""


def test_views_of_a_job_or_batch_outlive_close_without_crashing(make_ring, tmp_path):
    import os
    import subprocess
    import sys
    from conftest import hsring_bin
    ring = make_ring()
    script = tmp_path / "views_after_close.py"
    script.write_text(_VIEWS_AFTER_CLOSE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(script), ring.name, hsring_bin()],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "views outlived close" in done.stdout


def test_layers_whose_elements_are_not_dense_rows_are_copied(make_ring):
    # Column-major, every other column, rows reversed (a negative row stride): none is T
    # rows of H adjacent values at a non-negative pitch, so each is copied, never read as one.
    ring = make_ring()
    with hsring.Producer(ring.name, 0) as producer, hsring.Consumer(ring.name, 0) as consumer:
        job = producer.next_job(timeout=5)
        t = job.token_count
        good = [layer_array(producer.shape, job.batch_id, k, t) for k in range(3)]
        wide = np.zeros((t, 32), np.float32)
        wide[:, ::2] = good[1]
        layers = [np.asfortranarray(good[0]), wide[:, ::2], good[2][::-1].copy()[::-1]]
        assert not layers[0].flags.c_contiguous and layers[2].strides[0] < 0
        job.write_layers(layers)
        job.publish()
        batch = consumer.next_batch(timeout=5)
        for k in range(3):
            np.testing.assert_array_equal(batch.layers[k], good[k])
        batch.release()
