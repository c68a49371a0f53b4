"""Model folders for the prepare tests, built offline: a byte-level BPE tokenizer trained
with `tokenizers` on hsring's built-in corpus (data/corpus), saved as Hugging Face folders
with chat templates of three shapes found in the field, written for these tests:

- QWEN3: Qwen3's rules: a `<think>` block split out of the content, rendered only in the
  turns after the last user message, and always (empty if need be) in the last turn
  (`loop.last`); so a conversation's rendering is not the extension of its prefixes'.
- LLAMA3: Llama 3's header tokens (`<|start_header_id|>role<|end_header_id|>`), a BOS, a
  system header with dates, trimmed contents, `<|eot_id|>` after each turn.
- CHATML_GENERATION: ChatML whose assistant text is marked by `{% generation %}` tags.

For each, a builder that renders a conversation by hand, in plain Python, and returns the
character spans the drafter must learn (the assistant's text and its end-of-turn token):
the tests' independent account of the mask."""

import glob
import json
import os
import re

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
THINK_TOKENS = ["<think>", "</think>"]  # added, not special (as Qwen3 has them)
VOCAB = 640

QWEN3 = r"""{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

LLAMA3 = r"""{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: 26 Jul 2024\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}"""

CHATML_GENERATION = r"""{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\n' }}
    {%- if message['role'] == 'assistant' %}
        {%- generation %}
            {{- message['content'] + '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\n' }}
    {%- else %}
        {{- message['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}"""

# Per template: its BOS, its end-of-turn (the folder's eos) and the stop tokens of
# generation_config.json.
FOLDERS = {
    "qwen3": (QWEN3, None, "<|im_end|>", ["<|im_end|>", "<|endoftext|>"]),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", ["<|eot_id|>", "<|endoftext|>"]),
    "chatml": (CHATML_GENERATION, None, "<|im_end|>", ["<|im_end|>"]),
}


def train_tokenizer(path):
    """A byte-level BPE (Qwen's and Llama 3's kind) trained on the built-in corpus."""
    corpus = sorted(glob.glob(os.path.join(REPO, "data", "corpus", "*.txt")))
    assert corpus, "the built-in corpus (data/corpus/*.txt) is missing"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(THINK_TOKENS), special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(corpus, trainer)
    tok.add_tokens(THINK_TOKENS)
    tok.save(path)
    return tok


def make_model_folder(root, name, tokenizer_json, template=None, vocab_size=VOCAB):
    """An HF folder: tokenizer.json, tokenizer_config.json (chat template, BOS, EOS),
    config.json (vocab_size), generation_config.json (stop tokens)."""
    template_text, bos, eos, stops = FOLDERS[name] if template is None else template
    folder = os.path.join(root, name)
    os.makedirs(folder, exist_ok=True)
    with open(tokenizer_json) as f:
        tok_json = f.read()
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        f.write(tok_json)
    ids = {t["content"]: t["id"] for t in json.loads(tok_json)["added_tokens"]}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos,
              "pad_token": "<|endoftext|>", "model_max_length": 1 << 20,
              "clean_up_tokenization_spaces": False}
    if bos:
        config["bos_token"] = bos
    if template_text is not None:
        config["chat_template"] = template_text
    _write_json(os.path.join(folder, "tokenizer_config.json"), config)
    _write_json(os.path.join(folder, "config.json"),
                {"model_type": "qwen3", "vocab_size": vocab_size, "eos_token_id": ids[eos]})
    _write_json(os.path.join(folder, "generation_config.json"),
                {"eos_token_id": [ids[s] for s in stops]})
    return folder


def _write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)


# -- the tests' own renderings, with the spans the mask must cover ------------------------

def _think_split(content):
    """Qwen3's split of an assistant content into (reasoning, answer)."""
    if "</think>" not in content:
        return "", content
    answer = content.split("</think>")[-1].lstrip("\n")
    reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
    return reasoning, answer


def render_qwen3(messages, train_thinking=False):
    out, spans = "", []
    if messages[0]["role"] == "system":
        out += "<|im_start|>system\n" + messages[0]["content"] + "<|im_end|>\n"
    last_query = max(i for i, m in enumerate(messages) if m["role"] == "user")
    for i, m in enumerate(messages):
        if m["role"] == "user" or (m["role"] == "system" and i > 0):
            out += "<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n"
        elif m["role"] == "assistant":
            reasoning, answer = _think_split(m["content"])
            if m.get("reasoning_content") is not None:
                reasoning, answer = m["reasoning_content"], m["content"]
            out += "<|im_start|>assistant\n"
            start = len(out)
            if i > last_query and (i == len(messages) - 1 or reasoning):
                out += "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n"
                answer = answer.lstrip("\n")
            if not train_thinking:
                start = len(out)
            out += answer + "<|im_end|>"
            spans.append((start, len(out)))
            out += "\n"
    return out, spans


def render_llama3(messages, train_thinking=False):
    out = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
    if messages[0]["role"] == "system":
        out += messages[0]["content"].strip()
        messages = messages[1:]
    out += "<|eot_id|>"
    spans = []
    for m in messages:
        out += "<|start_header_id|>" + m["role"] + "<|end_header_id|>\n\n"
        start = len(out)
        out += m["content"].strip() + "<|eot_id|>"
        if m["role"] == "assistant":
            spans.extend(_without_think(out, start, len(out), train_thinking))
    return out, spans


def render_chatml(messages, train_thinking=False):
    out, spans = "", []
    for m in messages:
        out += "<|im_start|>" + m["role"] + "\n"
        start = len(out)
        out += m["content"] + "<|im_end|>"
        if m["role"] == "assistant":
            spans.extend(_without_think(out, start, len(out), train_thinking))
        out += "\n"
    return out, spans


def _without_think(text, start, end, train_thinking):
    """[start, end) less a leading <think>...</think> block and the whitespace after it."""
    if train_thinking:
        return [(start, end)]
    block = re.match(r"\s*<think>.*?</think>\s*", text[start:end], re.DOTALL)
    return [(start + block.end(), end)] if block else [(start, end)]


RENDER = {"qwen3": render_qwen3, "llama3": render_llama3, "chatml": render_chatml}


def write_random_qwen3_weights(folder, vocab_size=VOCAB + 8, seed=0):
    """A small Qwen3ForCausalLM of random fp32 weights (safetensors, transformers' names)
    into the folder, with its config.json: a target `hsring run --model FOLDER` can run.
    Its embedding has rows past the tokenizer's, as Qwen's has (151936 for 151669 tokens):
    the DFlash drafter takes its mask token there."""
    import numpy as np
    from safetensors.numpy import save_file
    hidden, inter, layers, heads, kv_heads, head_dim = 64, 128, 3, 4, 2, 16
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
              "vocab_size": vocab_size, "hidden_size": hidden, "intermediate_size": inter,
              "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "head_dim": head_dim, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "max_position_embeddings": 1024,
              "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False,
              "torch_dtype": "float32"}
    with open(os.path.join(folder, "config.json")) as f:
        config["eos_token_id"] = json.load(f).get("eos_token_id")
    _write_json(os.path.join(folder, "config.json"), config)
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)
    tensors = {"model.embed_tokens.weight": w(vocab_size, hidden),
               "model.norm.weight": np.ones(hidden, np.float32)}
    for i in range(layers):
        p = "model.layers.%d." % i
        tensors.update({
            p + "input_layernorm.weight": np.ones(hidden, np.float32),
            p + "post_attention_layernorm.weight": np.ones(hidden, np.float32),
            p + "self_attn.q_proj.weight": w(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": w(kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": w(kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": w(hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": np.ones(head_dim, np.float32),
            p + "self_attn.k_norm.weight": np.ones(head_dim, np.float32),
            p + "mlp.gate_proj.weight": w(inter, hidden),
            p + "mlp.up_proj.weight": w(inter, hidden),
            p + "mlp.down_proj.weight": w(hidden, inter),
        })
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
