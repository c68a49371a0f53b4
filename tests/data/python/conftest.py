"""Fixtures of the prepare tests: the trained tokenizer and model folders (chat_models.py),
`hsring data prepare` run in this process (cli.main, fast) or through the hsring binary."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chat_models  # noqa: E402
from hsring.prepare import cli  # noqa: E402


def hsring_bin():
    return os.path.join(os.environ["HSRING_BIN_DIR"], "hsring")


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json")
    chat_models.train_tokenizer(path)
    return path


@pytest.fixture(scope="session")
def models(tmp_path_factory, tokenizer_json):
    """The three test folders by name: qwen3, llama3, chatml."""
    root = str(tmp_path_factory.mktemp("models"))
    return {name: chat_models.make_model_folder(root, name, tokenizer_json)
            for name in chat_models.FOLDERS}


@pytest.fixture
def make_model(tmp_path, tokenizer_json):
    """A folder with a template of the test's own: (template, bos, eos, stops)."""
    def make(template, eos="<|im_end|>", bos=None, name="custom"):
        return chat_models.make_model_folder(str(tmp_path), name, tokenizer_json,
                                             template=(template, bos, eos, [eos]))
    return make


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")
    return str(path)


class Prepared:
    """The outcome of one prepare: exit code, summary, shards' documents."""

    def __init__(self, code, out, summary_path, stdout="", stderr=""):
        self.code, self.out, self.stdout, self.stderr = code, str(out), stdout, stderr
        self.summary = None
        if os.path.isfile(summary_path):
            with open(summary_path) as f:
                self.summary = json.load(f)

    def documents(self):
        """[(tokens, flags)] across the shards, in order."""
        import hsring
        docs = []
        for name in sorted(os.listdir(self.out)):
            if name.endswith(".hstok"):
                shard = hsring.read_shard(os.path.join(self.out, name))
                docs += [tuple(a.tolist() for a in shard.document(d))
                         for d in range(shard.documents)]
        return docs

    def reasons(self, kind="refused"):
        return [r["reason"] for r in self.summary[kind]]


@pytest.fixture
def prepare(tmp_path, capsys):
    """prepare(model, files, *flags): cli.main in this process; -o is a new folder."""
    count = [0]

    def run(model, files, *flags):
        count[0] += 1
        out = tmp_path / ("out-%d" % count[0])
        summary = tmp_path / ("summary-%d.json" % count[0])
        argv = ["--model", model, "--dataset", *map(str, files), "-o", str(out),
                "--summary-json", str(summary), *flags]
        code = cli.main(argv)
        captured = capsys.readouterr()
        return Prepared(code, out, str(summary), captured.out, captured.err)
    return run


def run_hsring(*args, env=None, timeout=300):
    """The hsring binary, with this interpreter as its Python (HSRING_PYTHON)."""
    full_env = dict(os.environ, HSRING_PYTHON=sys.executable)
    full_env.update(env or {})
    return subprocess.run([hsring_bin(), *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
