"""Through the hsring binary: `hsring data prepare` hands over to the Python package,
`hsring data inspect --doc` shows the trained spans, a missing Python side is said with the
one install command, and the shards feed a drafter (`hsring run --model FOLDER --data`)."""

import json
import os
import subprocess
import sys
import uuid

import chat_models
from conftest import hsring_bin, run_hsring, write_jsonl


def chats(n):
    return [{"messages": [
        {"role": "user", "content": "Question %d: what does the drafter learn?" % i},
        {"role": "assistant", "content": "The target's next tokens, from its hidden states (%d)." % i},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "It drafts them, and the target checks the draft."}]}
        for i in range(n)]


def sharegpt(n):
    return [{"conversations": [{"from": m["role"].replace("user", "human")
                                .replace("assistant", "gpt"), "value": m["content"]}
                               for m in c["messages"]]} for c in chats(n)]


def test_prepare_inspect_and_train(tmp_path, tokenizer_json):
    model = chat_models.make_model_folder(str(tmp_path), "qwen3", tokenizer_json)
    chat_models.write_random_qwen3_weights(model)
    files = [write_jsonl(tmp_path / "openai.jsonl", chats(24)),
             write_jsonl(tmp_path / "sharegpt.jsonl", sharegpt(24))]
    shards = str(tmp_path / "shards")
    done = run_hsring("data", "prepare", "--model", model, "--dataset", *files, "-o", shards,
                      "--summary-json", str(tmp_path / "s.json"))
    assert done.returncode == 0, done.stderr
    summary = json.load(open(tmp_path / "s.json"))
    assert summary["documents"] == 48 and summary["vocab_size"] == chat_models.VOCAB + 8
    assert "train with  hsring run --model" in done.stdout

    checked = run_hsring("data", "inspect", shards)
    assert checked.returncode == 0, checked.stderr
    assert "loss mask in 1 shards" in checked.stdout

    shown = run_hsring("data", "inspect", shards, "--doc", "30", "--model", model)
    assert shown.returncode == 0, shown.stderr
    assert "document 30 of 48" in shown.stdout
    assert "\u27e6The target's next tokens, from its hidden states (6).<|im_end|>\u27e7" \
        in shown.stdout
    assert "\u27e6It drafts them, and the target checks the draft.<|im_end|>\u27e7" in shown.stdout
    body = shown.stdout.split(":\n", 1)[1]  # after the legend
    assert body.count("\u27e6") == 2  # the user turns and headers are context
    per_token = run_hsring("data", "inspect", shards, "--doc", "0", "--model", model, "--tokens")
    assert per_token.returncode == 0 and " T '" in per_token.stdout
    past = run_hsring("data", "inspect", shards, "--doc", "48")
    assert past.returncode == 2 and "the corpus has 48 documents" in past.stderr
    alone = run_hsring("data", "inspect", shards, "--model", model)
    assert alone.returncode == 2 and "go with --doc" in alone.stderr

    # The shards as `hsring run` reads them: a drafter trains on them, with the same folder.
    ring = "hsring-prepare-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    try:
        run = run_hsring("run", "--ring", ring, "--model", model, "--data", shards,
                         "--run-dir", str(tmp_path / "run"), "--batches", "4",
                         "--max-tokens", "256", "--quiet", timeout=240)
    finally:
        subprocess.run([hsring_bin(), "ring", "remove", "--force", ring], capture_output=True)
    assert run.returncode == 0, run.stderr
    assert "4 batches consumed" in run.stderr
    assert os.path.isfile(tmp_path / "run" / "export" / "config.json")


def test_a_missing_python_side_is_said_with_the_install_command(tmp_path, models):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    path = write_jsonl(tmp_path / "c.jsonl", chats(1))
    args = ("data", "prepare", "--model", models["qwen3"], "--dataset", path,
            "-o", str(tmp_path / "o"))
    done = run_hsring(*args, env={"HSRING_PYTHON": str(bare / "bin" / "python")})
    assert done.returncode == 4, done.stderr
    assert "hsring data prepare: error: the Python module 'numpy' is missing" in done.stderr
    assert "-m pip install '" in done.stderr and "python[data]'" in done.stderr
    gone = run_hsring(*args, env={"HSRING_PYTHON": str(tmp_path / "no-python")})
    assert gone.returncode == 4
    assert "cannot run the Python interpreter" in gone.stderr and "[data]" in gone.stderr
    assert not os.path.exists(tmp_path / "o")
    # Flags are the Python side's, its --help included; a bad one exits 2.
    helped = run_hsring("data", "prepare", "--help")
    assert helped.returncode == 0 and "--prompts-only" in helped.stdout
    bad = run_hsring("data", "prepare", "--model", models["qwen3"], "--no-such-flag")
    assert bad.returncode == 2 and "arguments are required: --dataset, -o/--out" in bad.stderr
