"""`hsring data prepare` under the three test templates (chat_models.py): every document is
the template's own rendering of the whole conversation, tokenized, and every token's flag
is what the tests' hand rendering says (inside the assistant's text and its end-of-turn
token: 1; outside: 0), from OpenAI-messages and ShareGPT files alike. And the case that the
old turn-by-turn recipe of docs/data-format.md got wrong."""

import json

import pytest
from transformers import AutoTokenizer

import chat_models
from conftest import write_jsonl

CONVERSATIONS = [
    # One turn.
    [{"role": "user", "content": "What does the ring carry?"},
     {"role": "assistant", "content": "Hidden states, from the targets to the drafters."}],
    # Several turns and a system prompt: Qwen3 renders the last turn unlike the others.
    [{"role": "system", "content": "You answer in one sentence."},
     {"role": "user", "content": "Name a prime number."},
     {"role": "assistant", "content": "Seven is a prime number."},
     {"role": "user", "content": "And an even one?"},
     {"role": "assistant", "content": "Two is the only even prime."},
     {"role": "user", "content": "Thanks!"},
     {"role": "assistant", "content": "You are welcome."}],
    # Reasoning in the content, in an earlier turn and in the last.
    [{"role": "user", "content": "What is 12 times 3?"},
     {"role": "assistant", "content": "<think>\nTwelve threes: 36.\n</think>\n\nIt is 36."},
     {"role": "user", "content": "And 12 times 4?"},
     {"role": "assistant", "content": "<think>\n36 plus 12.\n</think>\n\n48."}],
    # The same text from the user and the assistant; a reply that spells a header's word.
    [{"role": "user", "content": "Yes."},
     {"role": "assistant", "content": "Yes."},
     {"role": "user", "content": "Who are you?"},
     {"role": "assistant", "content": "assistant"}],
    # Text beyond ASCII (several byte tokens to a character) and spaces a template trims.
    [{"role": "user", "content": "  Say caf\u00e9 in Japanese?  "},
     {"role": "assistant", "content": " \u30ab\u30d5\u30a7 \u2615, a caf\u00e9. "}],
]
# The OpenAI shape only: the reasoning in its own field, as vLLM writes it.
REASONING_FIELD = [
    {"role": "user", "content": "Is 91 prime?"},
    {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No: 7 times 13."}]

SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt"}


def as_sharegpt(messages):
    return {"conversations": [{"from": SHAREGPT_FROM[m["role"]], "value": m["content"]}
                              for m in messages]}


def expected_flags(tokenizer, text, spans):
    """The tests' own mask: a token is trained iff its characters lie in a span."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    flags = []
    for a, b in enc["offset_mapping"]:
        inside = any(s <= a and b <= e for s, e in spans)
        assert inside or not any(s < b and a < e for s, e in spans), \
            "the test's own spans cut a token: %r" % text[a:b]
        flags.append(1 if inside else 0)
    return enc["input_ids"], flags


@pytest.mark.parametrize("name", sorted(chat_models.FOLDERS))
@pytest.mark.parametrize("shape", ["openai", "sharegpt"])
@pytest.mark.parametrize("thinking", [False, True])
def test_documents_and_masks_are_exact(models, prepare, tmp_path, name, shape, thinking):
    conversations = CONVERSATIONS + ([REASONING_FIELD] if shape == "openai" else [])
    records = [{"messages": c} if shape == "openai" else as_sharegpt(c) for c in conversations]
    path = write_jsonl(tmp_path / ("chats-%s.jsonl" % shape), records)
    flags = ["--train-thinking"] if thinking else []
    result = prepare(models[name], [path], *flags)
    assert result.code == 0, result.stderr
    assert result.summary["refused"] == [] and result.summary["dropped"] == []
    route = "generation-tags" if name == "chatml" else "offsets"
    assert result.summary["mask_routes"] == {route: len(conversations)}
    tokenizer = AutoTokenizer.from_pretrained(models[name])
    documents = result.documents()
    assert len(documents) == len(conversations)
    for conversation, (tokens, flags) in zip(conversations, documents):
        rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
        text, spans = chat_models.RENDER[name](conversation, train_thinking=thinking)
        assert rendered == text  # the hand rendering is the template's
        want_tokens, want_flags = expected_flags(tokenizer, text, spans)
        assert tokens == want_tokens  # tokenize(render(whole conversation))
        for t, (got, want) in enumerate(zip(flags, want_flags)):
            assert got == want, "token %d (%r) of %r" % (
                t, tokenizer.decode([tokens[t]]), text)
    trained = sum(sum(f) for _, f in documents)
    assert result.summary["trained_tokens"] == trained
    assert result.summary["tokens"] == sum(len(t) for t, _ in documents)


def old_recipe(tokenizer, conversation):
    """docs/data-format.md's recipe before `hsring data prepare`: the template rendered turn
    by turn, each rendering assumed to extend the previous one."""
    tokens, flags = [], []
    for i in range(len(conversation)):
        upto = tokenizer.apply_chat_template(conversation[: i + 1], tokenize=True)
        upto = list(upto["input_ids"]) if hasattr(upto, "keys") else list(upto)
        new = upto[len(tokens):]
        tokens += new
        flags += [1 if conversation[i]["role"] == "assistant" else 0] * len(new)
    return tokens, flags


def test_the_old_recipe_gets_multi_turn_qwen3_wrong_and_prepare_does_not(models, prepare,
                                                                          tmp_path):
    multi_turn = [c for c in CONVERSATIONS if sum(m["role"] == "user" for m in c) > 1]
    tokenizer = AutoTokenizer.from_pretrained(models["qwen3"])
    result = prepare(models["qwen3"], [write_jsonl(tmp_path / "c.jsonl",
                                                   [{"messages": c} for c in multi_turn])])
    assert result.code == 0, result.stderr
    for conversation, (tokens, _) in zip(multi_turn, result.documents()):
        whole = tokenizer.apply_chat_template(conversation, tokenize=False)
        truth = tokenizer(whole, add_special_tokens=False)["input_ids"]
        assert tokens == truth
        old, _ = old_recipe(tokenizer, conversation)
        # Each earlier assistant turn was rendered as a last turn, with a <think> block the
        # whole conversation's rendering does not give it; no error said so.
        assert old != truth
        old_text = tokenizer.decode(old)
        assert old_text.count("<think>") > whole.count("<think>"), old_text
        # ... and the next user turn lost its header to the tokens counted as seen.
        assert old_text.count("<|im_start|>user") < whole.count("<|im_start|>user"), old_text


def test_a_json_array_file_and_a_system_prompt(models, prepare, tmp_path):
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([{"messages": c} for c in CONVERSATIONS[:2]]))
    result = prepare(models["qwen3"], [path], "--system-prompt", "Be kind.")
    assert result.code == 0, result.stderr
    tokenizer = AutoTokenizer.from_pretrained(models["qwen3"])
    first, second = result.documents()
    with_system = [{"role": "system", "content": "Be kind."}] + CONVERSATIONS[0]
    text, spans = chat_models.render_qwen3(with_system)
    assert (list(first[0]), list(first[1])) == tuple(expected_flags(tokenizer, text, spans))
    # A conversation with its own system prompt keeps it.
    assert "Be kind." not in tokenizer.decode(second[0])
    assert "one sentence" in tokenizer.decode(second[0])


@pytest.mark.parametrize("name", sorted(chat_models.FOLDERS))
def test_regenerated_last_turns_train_alone(models, prepare, tmp_path, name):
    """vLLM's or SGLang's output (docs/data-format.md, "Regenerated data"): OpenAI messages
    whose last assistant turn the target wrote, its reasoning apart; --train-turns last
    trains that turn only, --train-thinking its rendered reasoning with it."""
    regenerated = [
        CONVERSATIONS[1][:-1] + [{"role": "assistant", "content": "My pleasure.",
                                  "reasoning_content": "They said thanks."}],
        CONVERSATIONS[2],
    ]
    path = write_jsonl(tmp_path / "regenerated.jsonl", [{"messages": c} for c in regenerated])
    tokenizer = AutoTokenizer.from_pretrained(models[name])
    for thinking in (False, True):
        flags = ["--train-turns", "last"] + (["--train-thinking"] if thinking else [])
        result = prepare(models[name], [path], *flags)
        assert result.code == 0, result.stderr
        for conversation, (tokens, got) in zip(regenerated, result.documents()):
            text, spans = chat_models.RENDER[name](conversation, train_thinking=thinking)
            last_start = text.rfind("assistant")  # the last turn's header
            spans = [(s, e) for s, e in spans if s > last_start]
            assert len(spans) == 1
            want_tokens, want = expected_flags(tokenizer, text, spans)
            assert tokens == want_tokens and got == want, text
