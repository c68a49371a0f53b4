"""`hsring data prepare`: refusals that name the conversation, --max-length, --prompts-only,
plain text, --strict, the output folder and the summary."""

import json
import os

import pytest
from transformers import AutoTokenizer

import chat_models
import hsring
from conftest import write_jsonl

TURN = [{"role": "user", "content": "What is a ring?"},
        {"role": "assistant", "content": "A circle of slots in shared memory."}]


def chat(user, answer):
    return {"messages": [{"role": "user", "content": user},
                         {"role": "assistant", "content": answer}]}


# A template that rewrites the assistant's content: nothing of it is verbatim.
UPPER = (r"{% for m in messages %}<|im_start|>{{ m.role }}\n"
         r"{% if m.role == 'assistant' %}{{ m.content | upper }}{% else %}{{ m.content }}"
         r"{% endif %}<|im_end|>\n{% endfor %}")
# One that glues letters to the content's first word: "Th" + "e cat" tokenizes as "The".
GLUED = (r"{% for m in messages %}<|im_start|>{{ m.role }}\n"
         r"{% if m.role == 'assistant' %}Th{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}")
# One whose text before the content depends on the content (its length), so a short
# reply found in the header cannot be told from the reply itself.
COUNTED = (r"{% for m in messages %}<|im_start|>{{ m.role }} {{ m.content | length }}\n"
           r"{{ m.content }}<|im_end|>\n{% endfor %}")


def test_refusals_name_the_conversation_and_why(models, make_model, prepare, tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        chat("Hello?", "Hello."),                                             # line 1: fine
        "{not json",                                                          # 2
        [1, 2],                                                               # 3
        {"messages": [{"role": "wizard", "content": "hi"}]},                  # 4
        {"messages": [{"role": "user", "content": "hi"}]},                    # 5: no assistant
        {"messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": None,
                       "tool_calls": [{"id": "1"}]}]},                        # 6
        {"prompt": "hi"},                                                     # 7
        {"messages": [{"role": "user", "content": [{"type": "image_url"}]},
                      {"role": "assistant", "content": "A cat."}]},           # 8
        {"conversations": [{"from": "alien", "value": "hi"}]},                # 9
        {"messages": "hi"},                                                   # 10
    ])
    result = prepare(models["qwen3"], [path])
    assert result.code == 0, result.stderr
    assert result.summary["documents"] == 1 and result.summary["conversations"] == 10
    refused = {r["line"]: r["reason"] for r in result.summary["refused"]}
    assert sorted(refused) == list(range(2, 11))
    assert refused[2].startswith("not JSON")
    assert refused[3] == "a JSON list, not an object"
    assert "role 'wizard'" in refused[4]
    assert refused[5] == "no assistant turn to train on"
    assert "tool calls" in refused[6]
    assert refused[7] == ("no 'messages', 'conversations', 'text', 'input_ids' + 'loss_mask' "
                          "or 'custom_id' + 'response' field (its fields: prompt)")
    assert "'image_url'" in refused[8]
    assert "'alien'" in refused[9]
    assert "not a list of messages" in refused[10]
    assert all(r["where"] == "%s:%d" % (path, r["line"]) for r in result.summary["refused"])
    assert "refused %s:2: not JSON" % path in result.stdout

    # Templates whose mask cannot be exact: refused, saying why.
    cases = [(UPPER, "quiet words", "not in the template's rendering verbatim"),
             (GLUED, "e cat sat on the mat.", "straddles the edge of the trained text"),
             (COUNTED, "t", "ambiguous")]
    for i, (template, answer, why) in enumerate(cases):
        model = make_model(template, name="t%d" % i)
        r = prepare(model, [write_jsonl(tmp_path / ("one-%d.jsonl" % i),
                                        [chat("Who?", answer)])])
        assert r.code == 1, r.stdout + r.stderr  # nothing left to write
        assert len(r.summary or {}) == 0 and not os.path.exists(r.out)
        assert why in r.stderr and "one-%d.jsonl:1" % i in r.stderr, r.stderr


def test_strict_stops_at_the_first_refusal(models, prepare, tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [chat("a", "b"), "nope", chat("c", "d")])
    result = prepare(models["llama3"], [path], "--strict")
    assert result.code == 1
    assert "c.jsonl:2: refused: not JSON" in result.stderr and "--strict" in result.stderr
    assert not os.path.exists(result.out)


def test_max_length_truncates_or_drops_and_counts(models, prepare, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(models["qwen3"])
    long_answer = " ".join(["The drafter learns from the target."] * 20)
    path = write_jsonl(tmp_path / "c.jsonl", [chat("Short?", "Yes."), chat("Long?", long_answer)])
    lengths = [len(tokenizer.apply_chat_template(r["messages"], tokenize=True)["input_ids"])
               for r in map(json.loads, open(path))]
    limit = lengths[0] + 5
    assert lengths[1] > limit
    kept = prepare(models["qwen3"], [path], "--max-length", str(limit))
    assert kept.code == 0
    assert kept.summary["truncated"] == 1 and kept.summary["dropped"] == []
    (_, _), (tokens, flags) = kept.documents()
    assert len(tokens) == limit and any(flags)
    dropped = prepare(models["qwen3"], [path], "--max-length", str(limit), "--overflow", "drop")
    assert dropped.code == 0 and dropped.summary["truncated"] == 0
    assert dropped.summary["documents"] == 1
    assert dropped.reasons("dropped") == ["%d tokens, over --max-length %d" % (lengths[1], limit)]
    # Cut before the answer starts: nothing left to train, dropped rather than kept.
    early = prepare(models["qwen3"], [path], "--max-length", "4")
    assert early.code == 1
    assert "no trained token within the first 4" in early.stdout + early.stderr


def test_prompts_only_contract(models, prepare, tmp_path):
    """Each conversation up to and including its last user turn, rendered with the
    generation prompt, tokenized without added special tokens; no mask; what follows the
    last user turn is left out; a conversation without a user turn is refused."""
    conversations = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
         {"role": "assistant", "content": "Goodbye."}],
        [{"role": "user", "content": "Only a question?"}],
    ]
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": c} for c in conversations]
                       + [{"messages": [{"role": "system", "content": "x"}]}])
    for name in ("qwen3", "llama3"):
        tokenizer = AutoTokenizer.from_pretrained(models[name])
        result = prepare(models[name], [path], "--prompts-only", "--chat-template-kwargs",
                         '{"enable_thinking": false}')
        assert result.code == 0, result.stderr
        assert result.summary["mode"] == "prompts-only"
        assert result.reasons() == ["no user turn to prompt with"]
        shard = hsring.read_shard(os.path.join(result.out, "shard-00000.hstok"))
        assert shard.mask is None  # version 1: the prompt is all context to its users
        for conversation, (tokens, _) in zip(conversations, result.documents()):
            last_user = max(i for i, m in enumerate(conversation) if m["role"] == "user")
            text = tokenizer.apply_chat_template(conversation[:last_user + 1], tokenize=False,
                                                 add_generation_prompt=True,
                                                 enable_thinking=False)
            assert tokens == tokenizer(text, add_special_tokens=False)["input_ids"]
            assert "Goodbye" not in text
        if name == "qwen3":
            assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_plain_text_counts_every_token_and_formats_can_be_forced(models, prepare, tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "Plain text, all trained."},
                                              {"text": 5}, chat("a", "b")])
    result = prepare(models["qwen3"], [path], "--format", "text")
    assert result.code == 0
    tokenizer = AutoTokenizer.from_pretrained(models["qwen3"])
    [(tokens, flags)] = result.documents()
    assert tokens == tokenizer("Plain text, all trained.")["input_ids"] and all(flags)
    assert result.reasons() == ["'text' is a int, not a string",
                                "no 'text' field (--format text)"]
    assert result.summary["mask_routes"] == {"text": 1}


def test_output_folder_and_inputs(models, prepare, tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [chat("a", "b")])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    from hsring.prepare import cli
    assert cli.main(["--model", models["qwen3"], "--dataset", path, "-o",
                     str(tmp_path / "full")]) == 2
    assert cli.main(["--model", models["qwen3"], "--dataset", str(tmp_path / "none.jsonl"),
                     "-o", str(tmp_path / "o")]) == 2
    assert cli.main(["--model", str(tmp_path), "--dataset", path, "-o", str(tmp_path / "o")]) == 2
    (tmp_path / "bad.json").write_text("[1, 2")
    assert cli.main(["--model", models["qwen3"], "--dataset", str(tmp_path / "bad.json"), "-o",
                     str(tmp_path / "o")]) == 2
    assert not os.path.exists(tmp_path / "o")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".o.tmp")]
    with pytest.raises(SystemExit) as e:
        cli.main(["--model", models["qwen3"], "--dataset", path, "-o", str(tmp_path / "o"),
                  "--chat-template-kwargs", "[1]"])
    assert e.value.code == 2
    # An empty folder is fine; shards land in it with the summary, several when small.
    (tmp_path / "empty").mkdir()
    records = [chat("q%d" % i, "a%d" % i) for i in range(5)]
    assert cli.main(["--model", models["qwen3"], "--dataset",
                     write_jsonl(tmp_path / "five.jsonl", records), "-o",
                     str(tmp_path / "empty"), "--shard-tokens", "40"]) == 0
    names = sorted(os.listdir(tmp_path / "empty"))
    assert names[0] == "prepare.json" and len(names) > 2
    summary = json.load(open(tmp_path / "empty" / "prepare.json"))
    assert summary["shards"] == names[1:] and summary["vocab_size"] == chat_models.VOCAB


def test_a_folder_without_a_chat_template(make_model, prepare, tmp_path):
    model = make_model(None)
    chats = prepare(model, [write_jsonl(tmp_path / "c.jsonl", [chat("a", "b")])])
    assert chats.code == 2 and "has no chat template" in chats.stderr
    assert not os.path.exists(chats.out)
    text = prepare(model, [write_jsonl(tmp_path / "t.jsonl", [{"text": "Plain."}])])
    assert text.code == 0 and text.summary["documents"] == 1


def test_parquet(models, prepare, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    rows = [chat("Parquet?", "Columns of records."),
            {"messages": [{"role": "user", "content": "Two?"},
                          {"role": "assistant", "content": "Yes, two."}]}]
    pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "c.parquet"))
    result = prepare(models["llama3"], [tmp_path / "c.parquet"])
    assert result.code == 0, result.stderr
    assert result.summary["documents"] == 2
    tokenizer = AutoTokenizer.from_pretrained(models["llama3"])
    for row, (tokens, _) in zip(rows, result.documents()):
        text = tokenizer.apply_chat_template(row["messages"], tokenize=False)
        assert tokens == tokenizer(text, add_special_tokens=False)["input_ids"]
