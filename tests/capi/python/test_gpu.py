"""The CUDA paths (skipped without a GPU): torch CUDA tensors copied into the pinned slot
and published by the library's publisher thread, checked element by element by hsring's
C++ drafter; and a consumer that assembles [T, K*H] on the GPU."""

import os

import numpy as np
import pytest

import hsring
from synthetic import layer_array
from test_pipelines import assert_intact, run, target_cmd

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_cuda_tensors_feed_the_cpp_drafter(tmp_path):
    for layout in ([], ["--no-split-fc-layers"]):
        done, result = run(tmp_path, "--targets", "cpu:2", "--drafters", "cpu:1", "--dtype", "bf16",
                           "--batches", "60", *layout, "--target-cmd", target_cmd("--torch", "--cuda"))
        assert_intact(done, result, 60)


def test_consumer_assembles_hidden_on_the_gpu(make_ring):
    ring = make_ring(dtype="bf16")
    with hsring.Producer(ring.name, 0) as producer, \
            hsring.Consumer(ring.name, 0, device="cuda:0") as consumer:
        job = producer.next_job(timeout=5)
        layers = [torch.from_numpy(layer_array(producer.shape, job.batch_id, k, job.token_count))
                  .view(torch.bfloat16).cuda() for k in range(producer.num_layers)]
        job.write_layers(layers)
        job.publish()
        producer.flush()
        batch = consumer.next_batch(timeout=5)
        assert batch.hidden.is_cuda
        assert torch.equal(batch.hidden, torch.cat(layers, dim=1))
