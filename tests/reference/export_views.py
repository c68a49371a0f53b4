"""The DFlash export as loaders other than the reference class read it (docs/dflash-export.md,
"The export as the engines read it"): transformers' AutoModel with trust_remote_code, and
the config resolution of SGLang and vLLM. Each check returns a list of failures."""

import json
import os

import torch
import dflash.model as dm
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerFast

SGLANG_DEFAULT_MASK = "<|MASK|>"  # what SGLang assumes when dflash_config names no text


def write_byte_tokenizer(folder):
    """A byte-level BPE tokenizer whose token ids are the byte values (the built-in target's
    vocabulary), no merges and no special tokens, saved as transformers saves one."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest shift.
    table, shifted = {}, 0
    for b in range(256):
        c = chr(b)
        if c in alphabet and (33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255):
            table[b] = c
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    vocab = {table[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet), "the byte-level alphabet changed"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    check = AutoTokenizer.from_pretrained(folder)
    assert check("hi!")["input_ids"] == list(b"hi!"), "byte tokenizer does not map bytes to ids"


def check_remote_code(export, target, reference, block, report):
    """AutoModel.from_pretrained(export, trust_remote_code=True) loads hsring's own model
    file; on the same inputs it gives the reference class's block logits, and its greedy
    spec_generate (and the reference's dflash_generate run on it) decodes hsring eval's
    tokens."""
    failures = []
    model, info = AutoModel.from_pretrained(export, trust_remote_code=True,
                                            dtype=torch.float32, output_loading_info=True)
    model.eval()
    module = type(model).__module__
    print(f"trust_remote_code: {type(model).__name__} from {module}; loading info {info}",
          flush=True)
    if not module.startswith("transformers_modules") or "modeling_dflash" not in module:
        failures.append(f"AutoModel did not load the export's modeling_dflash.py: {module}")
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            failures.append(f"trust_remote_code loading: {key} {info[key]}")
    if (list(model.target_layer_ids), model.mask_token_id, model.block_size) != (
            block["layer_ids"], block["mask_token_id"], block["block_size"]):
        failures.append("trust_remote_code model: layer ids, mask token or block size differ")

    B = model.block_size
    prompt = torch.tensor([block["prompt"]], dtype=torch.long)
    with torch.inference_mode():
        out = target(prompt, output_hidden_states=True)
        ctx = dm.extract_context_feature(out.hidden_states, reference.target_layer_ids)
        ids = torch.full((1, B), model.mask_token_id, dtype=torch.long)
        ids[0, 0] = block["anchor"]
        noise = dm._raw_input_embeddings(target, ids)
        pos = torch.arange(prompt.shape[1] + B)[None]
        head = dm._output_head(target)
        ours = model.compute_logits(
            model(target_hidden=ctx, noise_embedding=noise, position_ids=pos)[:, 1:], head)
        ref = reference.compute_logits(
            reference(target_hidden=ctx, noise_embedding=noise, position_ids=pos)[:, 1:], head)
    diff = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    same_argmax = ours.argmax(-1).tolist() == ref.argmax(-1).tolist()
    print(f"trust_remote_code block: logits max |diff| vs the reference {diff:.3g} (max |logit| "
          f"{scale:.3g}), argmax equal {same_argmax}", flush=True)
    # Same fp32 weights and inputs; only the summation order of the matmuls may differ.
    if diff > 1e-5 * max(1.0, scale) or not same_argmax:
        failures.append(f"trust_remote_code block logits differ from the reference's: {diff:.3g}")

    for i, p in enumerate(report["prompts"]):
        ids = torch.tensor([p["prompt"]], dtype=torch.long)
        mine = model.spec_generate(target, ids, max_new_tokens=len(p["output"]))
        theirs = dm.dflash_generate(model, target, ids, max_new_tokens=len(p["output"]),
                                    stop_token_ids=None, temperature=0.0)
        mine, theirs = mine[0, ids.shape[1]:].tolist(), theirs[0, ids.shape[1]:].tolist()
        if mine != p["output"] or theirs != p["output"]:
            failures.append(f"prompt {i}: trust_remote_code spec_generate {mine}, dflash_generate"
                            f" on it {theirs}, hsring eval {p['output']}")
    print(f"trust_remote_code decoding: {len(report['prompts'])} prompts checked", flush=True)
    return failures


def _dflash_value(config, key):
    """Where every engine looks: dflash_config first, then the top level."""
    return config.get("dflash_config", {}).get(key, config.get(key))


def sglang_view(config, tokenizer):
    """SGLang's DFlash config resolution (python/sglang/srt/speculative/dflash_utils.py,
    parse_dflash_draft_config, and the worker's mask resolution): target_layer_ids,
    block_size and mask_token from dflash_config or the top level, the text defaulting to
    "<|MASK|>". The versions that shipped DFlash resolve the text in the target's
    tokenizer: its mask_token when equal, else its vocabulary, else they add it as a special
    token (its next id). Newer ones take mask_token_id when given."""
    text = _dflash_value(config, "mask_token") or SGLANG_DEFAULT_MASK
    if tokenizer.mask_token == text:
        by_text = tokenizer.mask_token_id
    elif text in tokenizer.get_vocab():
        by_text = tokenizer.get_vocab()[text]
    else:
        tokenizer.add_special_tokens({"mask_token": text})
        by_text = tokenizer.mask_token_id
    return {"target_layer_ids": list(_dflash_value(config, "target_layer_ids")),
            "block_size": _dflash_value(config, "block_size"),
            "mask_token_id (older, by text)": by_text,
            "mask_token_id (newer)": _dflash_value(config, "mask_token_id")}


def vllm_view(config):
    """vLLM's (vllm/model_executor/models/qwen3_dflash.py, config/speculative.py): the
    eagle_config, overridden by dflash_config, then the top level; the id only."""
    merged = dict(config.get("eagle_config", {}))
    merged.update(config.get("dflash_config", {}))
    pick = lambda key: merged.get(key, config.get(key))  # noqa: E731
    return {"target_layer_ids": list(pick("target_layer_ids")),
            "block_size": pick("block_size"), "mask_token_id": pick("mask_token_id")}


def _importable(module):
    try:
        __import__(module)
        return None
    except Exception as e:  # a missing package or one that needs a GPU stack at import
        return f"{type(e).__name__}: {e}".splitlines()[0][:160]


def check_engine_views(export, target_dir, block):
    failures = []
    with open(os.path.join(export, "config.json")) as f:
        config = json.load(f)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    want = {"target_layer_ids": block["layer_ids"], "block_size": block["block_size"]}
    mask = block["mask_token_id"]
    text = config["dflash_config"].get("mask_token")
    print(f"export mask token: id {mask}, text {text!r}", flush=True)
    if not text:
        failures.append("the export names no mask token text though the target has a tokenizer")
    if mask >= config["vocab_size"]:
        failures.append(f"mask token id {mask} outside the vocabulary {config['vocab_size']}")

    # The engines' own modules, where they import on this machine; the note says which ran.
    for engine, module in (("SGLang", "sglang.srt.speculative.dflash_utils"),
                           ("vLLM", "vllm.config.speculative")):
        why = _importable(module)
        print(f"[  NOTE   ] {engine}: " + (f"{module} imported" if why is None else
              f"{module} cannot be imported here ({why}); its config rules are checked as "
              "documented instead"), flush=True)
        if why is None and engine == "SGLang":
            from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
            parsed = parse_dflash_draft_config(draft_hf_config=config)
            got = (parsed.target_layer_ids, parsed.block_size, parsed.mask_token,
                   parsed.mask_token_id)
            if got != (block["layer_ids"], block["block_size"], text, mask):
                failures.append(f"SGLang's parse_dflash_draft_config resolves {got}")

    views = {"SGLang": sglang_view(config, tokenizer), "vLLM": vllm_view(config)}
    for engine, view in views.items():
        print(f"{engine} resolves: {view}", flush=True)
        for key, value in view.items():
            expected = mask if key.startswith("mask_token_id") else want[key]
            if value != expected:
                failures.append(f"{engine} resolves {key} = {value}, hsring trained {expected}")
    return failures
