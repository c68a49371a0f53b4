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
