"""prepare reads what users bring: random, cut and mistyped JSON Lines records are each
refused with a reason naming the line, or prepared; never a crash, never a silent loss."""

import json
import random

from conftest import write_jsonl

GOOD = [
    {"messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Hi?"},
                  {"role": "assistant", "content": "Hello."}]},
    {"conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hey."}]},
    {"text": "Some text."},
]
VALUES = [None, True, 0, -1, 2.5, "", "x", "assistant", "<|im_end|>", "<think>", [], {}, [1],
          {"role": "user"}, {"from": "gpt"}, "\u0000", "\ud7ff", "\udcff", "a\ud800b", 1e308]


def random_value(rng, depth=0):
    if depth > 2 or rng.random() < 0.5:
        return rng.choice(VALUES)
    if rng.random() < 0.5:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["role", "content", "from", "value", "messages", "conversations", "text",
            "reasoning_content", "tool_calls", "system", "type"]
    return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def mutate(rng, record):
    """One of: a field replaced by a random value (at any depth), a key dropped, the line
    cut, random bytes, or a random JSON value."""
    kind = rng.randrange(5)
    if kind == 0:
        record = json.loads(json.dumps(record))
        node = record
        while True:
            key = rng.choice(list(node)) if isinstance(node, dict) and node else \
                rng.randrange(len(node)) if isinstance(node, list) and node else None
            if key is None:
                break
            if rng.random() < 0.4 or not isinstance(node[key], (dict, list)):
                node[key] = random_value(rng)
                break
            node = node[key]
        return json.dumps(record)
    if kind == 1:
        record = dict(record)
        record.pop(rng.choice(list(record)))
        return json.dumps(record)
    if kind == 2:
        text = json.dumps(record)
        return text[:rng.randrange(1, len(text))]
    if kind == 3:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    return json.dumps(random_value(rng))


def test_random_malformed_lines_are_refused_with_reasons(models, prepare, tmp_path):
    rng = random.Random(38)
    lines, unmutated = [], 0
    for i in range(400):
        good = GOOD[i % len(GOOD)]
        keep = rng.random() < 0.2
        unmutated += keep
        lines.append(json.dumps(good) if keep else mutate(rng, good))
    path = tmp_path / "fuzz.jsonl"
    with open(path, "wb") as f:
        for line in lines:
            raw = line if isinstance(line, bytes) else line.encode("utf-8")
            f.write(raw.replace(b"\n", b" ") + b"\n")
    for name in ("qwen3", "chatml"):
        result = prepare(models[name], [path])
        assert result.code in (0, 1), result.stderr  # never a traceback
        s = result.summary or {}
        if result.code == 1:
            continue
        blank = sum(1 for line in open(path, "rb") if not line.strip())
        assert s["conversations"] == len(lines) - blank
        assert s["documents"] + len(s["refused"]) + len(s["dropped"]) == s["conversations"]
        assert s["documents"] >= unmutated
        for item in s["refused"] + s["dropped"]:
            assert item["reason"] and item["where"] == "%s:%d" % (path, item["line"])


def test_json_array_files_with_bad_members(models, prepare, tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([GOOD[0], 3, {"messages": [None]}, GOOD[1]]))
    result = prepare(models["llama3"], [path])
    assert result.code == 0, result.stderr
    assert result.summary["documents"] == 2
    assert [(r["where"], r["reason"]) for r in result.summary["refused"]] == [
        ("%s[1]" % path, "a JSON int, not an object"),
        ("%s[2]" % path, "message 0 is a null, not an object")]
    # A .json file holding JSON Lines (a common naming) is read as JSON Lines.
    lines = write_jsonl(tmp_path / "lines.json", GOOD[:2])
    assert prepare(models["llama3"], [lines]).summary["documents"] == 2
