"""examples/: hf_target.py (a transformers Qwen3 with random weights, built here and saved
as an HF folder) feeding hsring's C++ CPU DFlash drafter on a model ring, and the slot's
layers and labels checked against transformers' own hidden_states and logits; and
torch_drafter.py training from hsring's C++ CPU target, with a resume after SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from conftest import hsring_bin

torch = pytest.importorskip("torch", reason="the examples need torch")
transformers = pytest.importorskip("transformers", reason="hf_target.py needs transformers")

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.abspath(os.path.join(HERE, "..", "..", "..", "examples"))
PYTHON = os.environ.get("HSRING_TEST_PYTHON", sys.executable)
LAYERS = (0, 1, 3)


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory):
    """A 4-layer Qwen3 with random weights over the byte vocabulary of the built-in corpus."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=1024, tie_word_embeddings=False,
                         rms_norm_eps=1e-6, rope_theta=10000.0)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    with torch.no_grad():  # larger weights than the 0.02 init, so the layers differ clearly
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    path = tmp_path_factory.mktemp("qwen3")
    model.save_pretrained(str(path))
    return str(path)


def ring_name(tag):
    return "hsring-pytest-%s-%d-%s" % (tag, os.getpid(), uuid.uuid4().hex[:8])


def hf_target_cmd(*extra):
    return "%s %s --threads 1 %s" % (PYTHON, os.path.join(EXAMPLES, "hf_target.py"), " ".join(extra))


def test_hf_target_feeds_the_cpp_dflash_drafter(tmp_path, qwen3_folder):
    summary = tmp_path / "summary.json"
    argv = [hsring_bin(), "run", "--ring", ring_name("hf"), "--model", qwen3_folder, "--quiet",
            "--targets", "cpu:1", "--drafters", "cpu:1", "--layers", ",".join(map(str, LAYERS)),
            "--max-tokens", "128", "--slots", "4", "--hs-min-ready", "1", "--batches", "8",
            "--objective", "dflash", "--run-dir", str(tmp_path / "run"),
            "--summary-json", str(summary), "--log-dir", str(tmp_path / "logs"),
            "--target-cmd", hf_target_cmd()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr + (tmp_path / "logs" / "target-0.log").read_text()
    result = json.loads(summary.read_text())
    assert result["batches_torn"] == 0
    assert result["batches_lost"] == 0
    assert result["batches_duplicated"] == 0
    assert result["batches_consumed"] >= 8
    assert result["steps"] >= 8 and np.isfinite(result["final_loss"])
    assert "hf_target 0 epoch 1" in (tmp_path / "logs" / "target-0.log").read_text()


def test_hf_target_slots_equal_transformers_hidden_states(tmp_path, qwen3_folder):
    import hsring
    from transformers import AutoModelForCausalLM
    name = ring_name("hfcheck")
    subprocess.run([hsring_bin(), "run", "--create-only", "--ring", name, "--model", qwen3_folder,
                    "--targets", "cpu:1", "--drafters", "cpu:1", "--dtype", "fp32",
                    "--layers", ",".join(map(str, LAYERS)), "--max-tokens", "128", "--slots", "4",
                    "--hs-min-ready", "1", "--batches", "0"], check=True, capture_output=True)
    env = dict(os.environ, HSRING_RING=name, HSRING_ROLE="target", HSRING_INDEX="0",
               HSRING_MODEL=qwen3_folder)
    log = open(tmp_path / "target.log", "w")
    target = subprocess.Popen(hf_target_cmd(), shell=True, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(qwen3_folder, dtype=torch.float32).eval()
        consumer = hsring.Consumer(name, 0)
        assert consumer.shape.layer_ids == LAYERS
        checked_docs = 0
        for _ in range(2):
            batch = consumer.next_batch(timeout=120)
            assert batch is not None
            offsets = batch.doc_offsets
            assert offsets[0] == 0 and offsets[-1] == batch.token_count
            for d in range(batch.num_docs):
                s, e = int(offsets[d]), int(offsets[d + 1])
                assert list(batch.positions[s:e]) == list(range(e - s))
                ids = torch.from_numpy(batch.input_ids[s:e].astype(np.int64))[None]
                with torch.no_grad():  # the document alone: nothing of its neighbours
                    out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
                for k, i in enumerate(LAYERS):
                    np.testing.assert_allclose(batch.layers[k][s:e], out.hidden_states[i + 1][0].numpy(),
                                               rtol=1e-5, atol=1e-5)
                assert not np.allclose(batch.layers[0][s:e], batch.layers[1][s:e])
                greedy = out.logits[0].argmax(-1).numpy()
                assert (batch.labels[s:e] == greedy).mean() > 0.99  # ties may round differently
                checked_docs += 1
            batch.release()
        consumer.close()
        assert checked_docs >= 2
    finally:
        os.killpg(target.pid, signal.SIGTERM)
        try:
            target.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(target.pid, signal.SIGKILL)
            target.wait()
        log.close()
        subprocess.run([hsring_bin(), "ring", "remove", "--force", name], capture_output=True)
