"""`hsring data prepare` on what engines write when the target regenerates a dataset's
answers (docs/data-format.md, "Regenerated data"), each file in the shape its engine
documents, under the three test templates (chat_models.py):

- vLLM's / SGLang's OpenAI batch files: the output joined to the input by custom_id, the
  answer the last turn and the only one trained;
- SpecForge's regenerate_train_data.py rows (every assistant turn the target's) and its
  per-turn expansion (the last turn trained);
- speculators' response_regeneration rows: the engine's tokens and mask, kept, the
  reasoning block made context by its marker tokens.

Every mask is checked token by token against the tests' own rendering; every malformed
record is refused with its file and line."""


import pytest
from transformers import AutoTokenizer

import chat_models
from conftest import write_jsonl
from test_prepare_masks import expected_flags

NAMES = sorted(chat_models.FOLDERS)
EOS = {"qwen3": "<|im_end|>", "llama3": "<|eot_id|>", "chatml": "<|im_end|>"}

HISTORY = [{"role": "system", "content": "You answer in one sentence."},
           {"role": "user", "content": "Name a prime number."},
           {"role": "assistant", "content": "Seven is a prime number."},  # the dataset's
           {"role": "user", "content": "And an even one?"}]
ANSWER = {"role": "assistant", "content": "Two is the only even prime.",
          "reasoning_content": "Even means divisible by two."}


def last_turn_flags(tokenizer, name, conversation, thinking=False):
    """The document and flags when only the last assistant turn is trained."""
    text, spans = chat_models.RENDER[name](conversation, train_thinking=thinking)
    last_header = text.rfind("assistant")
    return expected_flags(tokenizer, text, [(s, e) for s, e in spans if s > last_header])


def check_documents(result, tokenizer, name, conversations, flags_of):
    assert result.code == 0, result.stderr
    documents = result.documents()
    assert len(documents) == len(conversations)
    for conversation, (tokens, flags) in zip(conversations, documents):
        want_tokens, want = flags_of(tokenizer, name, conversation)
        assert tokens == want_tokens
        assert flags == want, tokenizer.decode(tokens)


# -- vLLM / SGLang batch files -----------------------------------------------------------

def batch_request(cid, messages, **body):
    return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "./target", "messages": messages, "max_completion_tokens": 64,
                     **body}}


def batch_output(cid, message, status=200, error=None):
    body = {"id": "chatcmpl-" + cid, "object": "chat.completion", "model": "./target",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    return {"id": "vllm-" + cid, "custom_id": cid, "error": error,
            "response": {"status_code": status, "request_id": "r-" + cid, "body": body}}


def vllm_message(answer):
    """vLLM's chat message: the reasoning under `reasoning` (older: reasoning_content),
    the other name null, an empty tool_calls list."""
    return {"role": "assistant", "content": answer["content"], "refusal": None,
            "reasoning_content": None, "reasoning": answer.get("reasoning_content"),
            "tool_calls": []}


@pytest.mark.parametrize("name", NAMES)
def test_batch_output_joined_to_its_requests_trains_the_answer(models, prepare, tmp_path, name):
    one_turn = [{"role": "user", "content": "What does the ring carry?"}]
    plain = {"role": "assistant", "content": "Hidden states, to the drafters."}
    requests = write_jsonl(tmp_path / "batch-in.jsonl", [
        batch_request("a", HISTORY), batch_request("b", one_turn),
        batch_request("never-answered", one_turn)])
    # The output in another order than the input, and before it on the command line.
    outputs = write_jsonl(tmp_path / "batch-out.jsonl", [
        batch_output("b", vllm_message(plain)), batch_output("a", vllm_message(ANSWER))])
    result = prepare(models[name], [outputs, requests])
    conversations = [one_turn + [plain], HISTORY + [ANSWER]]
    tokenizer = AutoTokenizer.from_pretrained(models[name])
    check_documents(result, tokenizer, name, conversations, last_turn_flags)
    assert result.summary["batch_requests"] == 3 and result.summary["conversations"] == 2
    assert result.summary["refused"] == []
    [dropped] = result.summary["dropped"]
    assert dropped["where"] == requests + ":3"
    assert "'never-answered': no answer" in dropped["reason"]
    # --train-turns all trains the dataset's earlier answer too, as asked.
    every = prepare(models[name], [outputs, requests], "--train-turns", "all")
    _, (_, flags) = every.documents()
    assert sum(flags) > sum(result.documents()[1][1])


def test_malformed_batch_records_are_refused_by_line(models, prepare, tmp_path):
    turn = [{"role": "user", "content": "Hi?"}]
    requests = write_jsonl(tmp_path / "in.jsonl", [
        batch_request("ok", turn), batch_request("dup", turn), batch_request("dup", turn),
        batch_request("tools", turn, tools=[{"type": "function"}]),
        batch_request("cont", turn + [{"role": "assistant", "content": "Hel"}],
                      continue_final_message=True),
        batch_request("think", turn, chat_template_kwargs={"enable_thinking": False}),
        batch_request("twice", turn), batch_request("n2", turn), batch_request("call", turn),
        batch_request("failed", turn), batch_request("http", turn)])
    reply = {"role": "assistant", "content": "Hello."}
    two = batch_output("n2", reply)
    two["response"]["body"]["choices"].append(two["response"]["body"]["choices"][0])
    outputs = write_jsonl(tmp_path / "out.jsonl", [
        batch_output("ok", reply),                                               # 1
        batch_output("dup", reply),                                              # 2
        batch_output("tools", reply),                                            # 3
        batch_output("cont", reply),                                             # 4
        batch_output("think", reply),                                            # 5
        batch_output("twice", reply), batch_output("twice", reply),              # 6, 7
        two,                                                                     # 8
        batch_output("call", {"role": "assistant", "content": None,
                              "tool_calls": [{"id": "c1", "type": "function"}]}),  # 9
        {"id": "x", "custom_id": "failed", "response": None,
         "error": {"message": "engine died"}},                                   # 10
        batch_output("http", {"role": "assistant", "content": ""}, status=400),  # 11
        batch_output("stranger", reply),                                         # 12
    ])
    result = prepare(models["qwen3"], [requests, outputs])
    assert result.code == 0, result.stderr
    assert result.summary["documents"] == 2  # "ok", and "twice" answered once
    refused = {r["where"]: r["reason"] for r in result.summary["refused"]}
    assert "is also the request at %s:2" % requests in refused[requests + ":3"]
    out = {int(w.rsplit(":", 1)[1]): r for w, r in refused.items() if w.startswith(outputs)}
    assert sorted(out) == [2, 3, 4, 5] + list(range(7, 13))
    assert "names several requests" in out[2]
    assert "offers tools" in out[3]
    assert "continues its last message" in out[4]
    assert ('rendered with chat_template_kwargs {"enable_thinking": false}, this run with {}'
            in out[5])
    assert "answered already, at %s:6" % outputs in out[7]
    assert "2 choices" in out[8]
    assert "tool calls are not supported" in out[9]
    assert "the request failed: {'message': 'engine died'}" in out[10]
    assert "failed with HTTP 400" in out[11]
    assert "no request of that id" in out[12]
    # The request's template variables, given: its answer is read.
    same = prepare(models["qwen3"], [requests, outputs], "--chat-template-kwargs",
                   '{"enable_thinking": false}')
    assert same.summary["documents"] == 1  # "think"; no longer "ok" and "twice"
    assert any('this run with {"enable_thinking": false}' in r for r in same.reasons())
    # Output records without their request file: each refused, saying to give it.
    alone = prepare(models["qwen3"], [outputs])
    assert alone.code == 1 and "give the batch input file beside its output" in alone.stderr


# -- SpecForge ---------------------------------------------------------------------------

def specforge_row(i, messages, **extra):
    return {"id": "sample-%d" % i, "conversations": messages, "status": "success", **extra}


def all_turn_flags(tokenizer, name, conversation, thinking=False):
    text, spans = chat_models.RENDER[name](conversation, train_thinking=thinking)
    return expected_flags(tokenizer, text, spans)


@pytest.mark.parametrize("name", NAMES)
def test_specforge_regenerated_rows(models, prepare, tmp_path, name):
    """regenerate_train_data.py regenerates every assistant turn: all trained. A row of
    expand_reasoning_conversations.py trains its last turn: the others are history."""
    regenerated = [m for m in HISTORY if m["role"] != "assistant"]
    regenerated.insert(2, {"role": "assistant", "content": "Seven.",
                           "reasoning_content": "Seven has no divisor."})
    regenerated.append(ANSWER)
    event = [dict(m) for m in regenerated]
    event[2].pop("reasoning_content")  # history keeps the visible answer only
    rows = write_jsonl(tmp_path / "regen.jsonl", [
        specforge_row(0, regenerated),
        specforge_row(1, event, source_id="sample-1", assistant_turn_index=1),
        {"id": "sample-2", "conversations": HISTORY[:2], "status": "error",
         "error": "Connection refused"}])
    tokenizer = AutoTokenizer.from_pretrained(models[name])
    for fmt in ([], ["--format", "specforge"]):
        result = prepare(models[name], [rows], *fmt)
        assert result.code == 0, result.stderr
        (tokens0, flags0), (tokens1, flags1) = result.documents()
        assert (tokens0, flags0) == tuple(all_turn_flags(tokenizer, name, regenerated))
        assert (tokens1, flags1) == tuple(last_turn_flags(tokenizer, name, event))
        [refused] = result.summary["refused"]
        assert refused["where"] == rows + ":3"
        assert refused["reason"] == ("the regeneration's status is 'error': Connection "
                                     "refused: not an answer of the target")
    sharegpt = write_jsonl(tmp_path / "sharegpt.jsonl", [
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]}])
    wrong = prepare(models[name], [sharegpt], "--format", "specforge")
    assert wrong.code == 1 and "sharegpt.jsonl:1" in wrong.stderr
    assert "from/value is --format sharegpt" in wrong.stderr


# -- speculators -------------------------------------------------------------------------

def speculators_row(tokenizer, name, i, prompt_messages, answer):
    """What response_regeneration/script.py writes: the engine's prompt ids (the template
    with its generation prompt) and the generated ids, the latter marked; the text their
    decode. The target's generation, token by token: [reasoning block] answer, end of turn."""
    prompt = tokenizer.apply_chat_template(prompt_messages, tokenize=False,
                                           add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    reasoning = ("<think>\n%s\n</think>\n\n" % answer["reasoning_content"]
                 if name == "qwen3" else "")
    reasoning_ids = tokenizer(reasoning, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(answer["content"] + EOS[name], add_special_tokens=False)["input_ids"]
    ids = prompt_ids + reasoning_ids + answer_ids
    row = {"id": "conv-%d_gen0" % i, "primary_id": "conv-%d" % i, "input_ids": ids,
           "loss_mask": [0] * len(prompt_ids) + [1] * (len(ids) - len(prompt_ids)),
           "text": tokenizer.decode(ids, skip_special_tokens=False),
           "metadata": {"idx": i, "finish_reason": "stop", "is_tool_call": False}}
    untrained = len(prompt_ids) + len(reasoning_ids)
    return row, prompt_ids, [0] * untrained + [1] * len(answer_ids)


@pytest.mark.parametrize("name", NAMES)
def test_speculators_rows_keep_the_engines_tokens(models, prepare, tmp_path, name):
    tokenizer = AutoTokenizer.from_pretrained(models[name])
    row, prompt_ids, flags = speculators_row(tokenizer, name, 0, HISTORY, ANSWER)
    path = write_jsonl(tmp_path / "regen.jsonl", [row])
    result = prepare(models[name], [path])
    assert result.code == 0, result.stderr
    assert result.summary["mask_routes"] == {"tokens": 1}
    [(tokens, got)] = result.documents()
    assert tokens == row["input_ids"] and got == flags
    # The document is the template's rendering of the conversation, to the answer's end.
    whole = tokenizer.apply_chat_template(HISTORY + [ANSWER], tokenize=False)
    decoded = tokenizer.decode(tokens, skip_special_tokens=False)
    assert whole in (decoded, decoded + "\n")  # ChatML's newline after the turn
    # --train-thinking: every generated token, as the row's own mask says.
    thinking = prepare(models[name], [path], "--train-thinking")
    assert thinking.documents()[0][1] == row["loss_mask"]
    # --prompts-only: what the engine's target was given.
    prompts = prepare(models[name], [path], "--prompts-only")
    assert prompts.documents()[0][0] == prompt_ids


def test_malformed_speculators_rows_are_refused_by_line(models, prepare, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(models["qwen3"])
    good, _, _ = speculators_row(tokenizer, "qwen3", 0, HISTORY, ANSWER)

    def bad(**change):
        return dict(good, **change)
    other_text = good["text"].replace("even prime", "odd prime")
    path = write_jsonl(tmp_path / "regen.jsonl", [
        good,                                                                    # 1
        bad(loss_mask=good["loss_mask"][:-1]),                                   # 2
        bad(loss_mask=[2] + good["loss_mask"][1:]),                              # 3
        bad(input_ids=good["input_ids"][:-1] + [chat_models.VOCAB + 5]),         # 4
        bad(text=other_text),                                                    # 5
        bad(input_ids="1 2 3"),                                                  # 6
        bad(loss_mask=[0] * len(good["loss_mask"])),                             # 7
        {"id": "conv-9", "metadata": {"idx": 9, "error": "ConnectionError()"},
         "input_ids": [], "loss_mask": []},                                      # 8
    ])
    result = prepare(models["qwen3"], [path])
    assert result.code == 0, result.stderr
    assert result.summary["documents"] == 1
    refused = {r["line"]: r["reason"] for r in result.summary["refused"]}
    assert sorted(refused) == list(range(2, 9))
    assert refused[2] == "'input_ids' has %d tokens and 'loss_mask' %d flags" % (
        len(good["input_ids"]), len(good["loss_mask"]) - 1)
    assert refused[3] == "'loss_mask'[0] is 2, not 0 or 1"
    assert refused[4] == "token %d is outside the model's vocabulary of %d" % (
        chat_models.VOCAB + 5, chat_models.VOCAB)
    assert "another text than its 'text'" in refused[5] and "another tokenizer" in refused[5]
    assert refused[6] == "'input_ids' is a str, not a list"
    assert refused[7] == "'loss_mask' marks no token"
    assert refused[8] == "the regeneration failed on it: ConnectionError()"
    assert all(r["where"] == "%s:%d" % (path, r["line"]) for r in result.summary["refused"])
    no_system = prepare(models["qwen3"], [path], "--system-prompt", "Be kind.", "--strict")
    assert no_system.code == 1 and "regen.jsonl:1: refused: --system-prompt" in no_system.stderr
