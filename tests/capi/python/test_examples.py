"""examples/: hf_target.py (transformers models with random weights, built here and saved
as HF folders: a dense Qwen3, a Qwen3-MoE, and a Mixtral, an architecture hsring's own
forward does not build) feeding hsring's C++ CPU DFlash drafter on a model ring, and the
slot's layers and labels checked against transformers' own hidden_states and logits; and
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
    return save_random(Qwen3ForCausalLM(config).to(torch.float32), tmp_path_factory, "qwen3")


def save_random(model, tmp_path_factory, tag):
    with torch.no_grad():  # larger weights than the 0.02 init, so the layers differ clearly
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(4.0)
    path = tmp_path_factory.mktemp(tag)
    model.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def qwen3_moe_folder(tmp_path_factory):
    """A 4-layer Qwen3-MoE with random weights: 4 experts of 32, 2 per token, renormalised."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(0)
    config = Qwen3MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                            moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                            norm_topk_prob=True, num_hidden_layers=4, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                            tie_word_embeddings=False, rms_norm_eps=1e-6)
    return save_random(Qwen3MoeForCausalLM(config).to(torch.float32), tmp_path_factory, "qwen3moe")


@pytest.fixture(scope="module")
def mixtral_folder(tmp_path_factory):
    """A 4-layer Mixtral with random weights: a mixture hsring's own forward refuses, so
    the run reads only its outline (hidden size, vocabulary, layers, embedding, LM head)."""
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(0)
    config = MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=64,
                           num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           max_position_embeddings=1024, tie_word_embeddings=False)
    return save_random(MixtralForCausalLM(config).to(torch.float32), tmp_path_factory, "mixtral")


def ring_name(tag):
    return "hsring-pytest-%s-%d-%s" % (tag, os.getpid(), uuid.uuid4().hex[:8])


def hf_target_cmd(*extra):
    return "exec %s %s --threads 1 %s" % (PYTHON, os.path.join(EXAMPLES, "hf_target.py"), " ".join(extra))


@pytest.mark.parametrize("folder", ["qwen3_folder", "mixtral_folder"])
def test_hf_target_feeds_the_cpp_dflash_drafter(tmp_path, folder, request):
    folder = request.getfixturevalue(folder)
    summary = tmp_path / "summary.json"
    argv = [hsring_bin(), "run", "--ring", ring_name("hf"), "--model", folder, "--quiet",
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


@pytest.mark.parametrize("folder", ["qwen3_folder", "qwen3_moe_folder"])
def test_hf_target_slots_equal_transformers_hidden_states(tmp_path, folder, request):
    import hsring
    from transformers import AutoModelForCausalLM
    folder = request.getfixturevalue(folder)
    name = ring_name("hfcheck")
    subprocess.run([hsring_bin(), "run", "--create-only", "--ring", name, "--model", folder,
                    "--targets", "cpu:1", "--drafters", "cpu:1", "--dtype", "fp32",
                    "--layers", ",".join(map(str, LAYERS)), "--max-tokens", "128", "--slots", "4",
                    "--hs-min-ready", "1", "--batches", "0"], check=True, capture_output=True)
    env = dict(os.environ, HSRING_RING=name, HSRING_ROLE="target", HSRING_INDEX="0",
               HSRING_MODEL=folder)
    log = open(tmp_path / "target.log", "w")
    target = subprocess.Popen(hf_target_cmd(), shell=True, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
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
                    got = batch.layers[k][s:e]
                    if i == 3:  # the last layer: hsring's is before the final norm, HF's after
                        with torch.no_grad():
                            got = model.model.norm(torch.from_numpy(got.copy())).numpy()
                    np.testing.assert_allclose(got, out.hidden_states[i + 1][0].numpy(),
                                               rtol=1e-5, atol=1e-5)
                assert not np.allclose(batch.layers[2][s:e], out.hidden_states[4][0].numpy(),
                                       rtol=1e-3, atol=1e-3)
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


def load_torch_drafter():
    import importlib.util
    spec = importlib.util.spec_from_file_location("torch_drafter",
                                                  os.path.join(EXAMPLES, "torch_drafter.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_drafter_blocks_see_only_their_documents_context_before_the_anchor():
    td = load_torch_drafter()
    torch.manual_seed(1)
    T, H, K, V, B = 40, 16, 2, 32, 4
    config = {"hidden_size": H, "target_hidden": H, "num_layers_captured": K, "heads": 4,
              "kv_heads": 2, "head_dim": 4, "intermediate_size": 24, "eps": 1e-6,
              "rope_theta": 10000.0, "draft_layers": 2, "block_size": B, "loss_gamma": 2.0,
              "mask_token_id": V - 1, "vocab_size": V, "target_layer_ids": [0, 1]}
    model = td.DflashDrafter(config, torch.randn(V, H), torch.randn(V, H)).double()
    offsets = torch.tensor([0, 15, 40])
    positions = torch.cat([torch.arange(15), torch.arange(25)])
    tokens = torch.randint(0, V - 1, (T,))
    labels = td.step_labels(tokens, offsets, torch.zeros(T, dtype=torch.long), "data")
    assert labels[14] == td.IGNORE and labels[39] == td.IGNORE and labels[3] == tokens[4]
    anchors, starts = [5, 20, 30], [(0, 15), (15, 40), (15, 40)]
    bt, bp, targets, mask = td.build_blocks(tokens, positions, labels, anchors, starts, B, V - 1, T)
    assert targets.view(3, B)[1, 2] == labels[21]  # position j against labels[a + j - 1]
    # The published anchor rule: a block cut off by its document's end scores nothing past it.
    picked, docs = td.sample_anchors(offsets, labels, B, 100, torch.Generator().manual_seed(0))
    assert 13 in picked and 14 not in picked and 1 in picked and 0 not in picked
    assert docs[picked.index(13)] == (0, 15)
    _, _, cut, _ = td.build_blocks(tokens, positions, labels, [13], [(0, 15)], B, V - 1, T)
    assert cut.tolist() == [td.IGNORE, labels[13].item(), td.IGNORE, td.IGNORE]
    assert bp.view(3, B)[1].tolist() == [5, 6, 7, 8]
    features = torch.randn(T, K * H, dtype=torch.float64)
    base = model(features, positions, bt, bp, mask).view(3, B, V)
    for row, unchanged, changed in [(5, [0, 1, 2], []), (25, [0, 1], [2]), (3, [1, 2], [0]),
                                    (15, [0], [1, 2]), (35, [0, 1, 2], [])]:
        moved = features.clone()
        moved[row] += 1.0
        out = model(moved, positions, bt, bp, mask).view(3, B, V)
        for b in unchanged:
            assert torch.equal(out[b], base[b]), (row, b)
        for b in changed:
            assert not torch.allclose(out[b], base[b]), (row, b)
    loss, weight, _ = td.dflash_loss(base.reshape(-1, V), targets, B, 2.0)
    w = torch.exp(-torch.arange(B - 1, dtype=torch.float64) / 2.0)
    ce = torch.nn.functional.cross_entropy(base[:, 1:].reshape(-1, V), targets.view(3, B)[:, 1:].reshape(-1),
                                           reduction="none").view(3, B - 1)
    assert torch.allclose(loss, (ce * w).sum() / (3 * w.sum()))


def test_torch_drafter_trains_from_the_cpp_target_and_resumes_after_sigkill(tmp_path):
    summary, steps, ckpt = tmp_path / "summary.json", tmp_path / "steps.jsonl", tmp_path / "ckpt"
    # No `exec`: dash does not exec a lone `-c` command, so the shell dies at the drain's
    # SIGTERM before the drafter writes its final checkpoint; the drain waits for the
    # command's whole process group, which the last assertion proves.
    cmd = ("%s %s --threads 1 --checkpoint-dir %s --checkpoint-every 4 --log-json %s --lr 3e-3 "
           "--warmup-steps 4 --kill-at-step 6" % (PYTHON, os.path.join(EXAMPLES, "torch_drafter.py"),
                                                   ckpt, steps))
    argv = [hsring_bin(), "run", "--ring", ring_name("td"), "--model", "builtin", "--quiet",
            "--targets", "cpu:1", "--drafters", "cpu:1", "--hs-min-ready", "1", "--batches", "24",
            "--run-dir", str(tmp_path / "run"), "--summary-json", str(summary),
            "--log-dir", str(tmp_path / "logs"), "--drafter-cmd", cmd]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    log = (tmp_path / "logs" / "drafter-0.log").read_text()
    assert done.returncode == 0, done.stderr + log
    result = json.loads(summary.read_text())
    assert result["batches_torn"] == 0
    assert result["batches_lost"] == 0
    assert result["batches_duplicated"] == 0
    assert result["restarts_drafter"] == 1
    assert "resumed from %s (step 4)" % os.path.join(str(ckpt), "step-00000004.pt") in log
    records = [json.loads(line) for line in steps.read_text().splitlines()]
    first = [r["step"] for r in records if r["epoch"] == 1]
    second = [r["step"] for r in records if r["epoch"] > 1]
    assert first == list(range(1, 7))
    assert second and second[0] == 5 and second == list(range(5, 5 + len(second)))
    losses = [r["loss"] for r in records]
    assert all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:3]), losses
    assert os.path.exists(ckpt / ("step-%08d.pt" % second[-1]))  # the final checkpoint
