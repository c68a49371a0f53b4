"""hsring's DFlash drafter as a transformers model (docs/dflash-export.md, "Loading with
trust_remote_code").

hsring writes this file into every DFlash export, and config.json's auto_map names its
class, so that

    drafter = AutoModel.from_pretrained(EXPORT, trust_remote_code=True)

loads the export with torch and transformers alone. It computes what hsring trained
(train/dflash_model.h): the target's captured hidden states, concatenated and projected by
`fc` and normed by `hidden_norm`, are the context; each draft layer's queries are the
block's rows, its keys and values those of the context and of the block, all visible to
every row (no mask); the block's input is the target's own embedding of the anchor token
and of mask tokens; the final `norm` is inside the drafter, the target's LM head outside.

The interface is the reference package's (`dflash`, `DFlashDraftModel`): `forward(
position_ids, noise_embedding, target_hidden, past_key_values, use_cache)`,
`compute_logits(hidden, output_head)`, `target_layer_ids`, `block_size`, `mask_token_id`,
so its `dflash_generate` runs this model too; `spec_generate` here is a plain greedy loop
without caches, for checking and small use.
"""

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.models.qwen3.configuration_qwen3 import Qwen3Config


def _dflash_value(config, key, default=None):
    """dflash_config's value of `key`, else the top-level one (as the engines read it)."""
    section = getattr(config, "dflash_config", None) or {}
    if key in section:
        return section[key]
    return getattr(config, key, default)


def _rope_base(config):
    params = getattr(config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 whatever the weights' dtype."""

    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_tables(position_ids, head_dim, base, dtype):
    """cos and sin [batch, positions, head_dim] of the default (unscaled) RoPE, in float32
    before the cast, each frequency used for both halves of a head."""
    inverse = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32,
                                           device=position_ids.device) / head_dim))
    angles = position_ids.float()[..., None] * inverse
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x, cos, sin):
    """RoPE on x [batch, heads, positions, head_dim], the halves-rotation convention."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + turned * sin[:, None]


class BlockAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        width, q_width, kv_width = (config.hidden_size, self.heads * self.head_dim,
                                    self.kv_heads * self.head_dim)
        self.q_proj = nn.Linear(width, q_width, bias=False)
        self.k_proj = nn.Linear(width, kv_width, bias=False)
        self.v_proj = nn.Linear(width, kv_width, bias=False)
        self.o_proj = nn.Linear(q_width, width, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, x, context, cos, sin, cache):
        batch, rows = x.shape[:2]
        # Keys and values cover the new context rows, then the block; queries the block only.
        source = torch.cat([context, x], dim=1)
        q = self.q_norm(self.q_proj(x).view(batch, rows, self.heads, self.head_dim))
        k = self.k_norm(self.k_proj(source).view(batch, -1, self.kv_heads, self.head_dim))
        v = self.v_proj(source).view(batch, -1, self.kv_heads, self.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = rotate(q, cos[:, -rows:], sin[:, -rows:])
        k = rotate(k, cos, sin)
        if cache is not None:  # earlier context rows, kept by the caller's cache
            k, v = cache.update(k, v, self.layer_idx)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        # No mask: every block row sees the whole context and the whole block.
        out = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(batch, rows, -1))


class GatedMlp(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = BlockAttention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMlp(config)

    def forward(self, x, context, cos, sin, cache):
        # The context is the projected target features as they are: no input norm.
        x = x + self.self_attn(self.input_layernorm(x), context, cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(PreTrainedModel):
    config_class = Qwen3Config
    base_model_prefix = "model"
    _no_split_modules = ["DraftLayer"]

    def __init__(self, config):
        super().__init__(config)
        self.target_layer_ids = list(_dflash_value(config, "target_layer_ids"))
        self.block_size = int(_dflash_value(config, "block_size", 16))
        self.mask_token_id = int(_dflash_value(config, "mask_token_id"))
        self.mask_token = _dflash_value(config, "mask_token")
        width = config.hidden_size
        self.fc = nn.Linear(len(self.target_layer_ids) * width, width, bias=False)
        self.hidden_norm = RMSNorm(width, config.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(width, config.rms_norm_eps)
        self.post_init()

    def _init_weights(self, module):
        # Every weight comes from model.safetensors; these are for a fresh model only.
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)

    def context_features(self, hidden_states):
        """The drafter's input from a target forward's output_hidden_states: layer id i is
        hidden_states[i + 1], the output of decoder layer i."""
        return torch.cat([hidden_states[i + 1] for i in self.target_layer_ids], dim=-1)

    def forward(self, position_ids, noise_embedding, target_hidden, past_key_values=None,
                use_cache=False, attention_mask=None, **kwargs):
        """The final hidden states [batch, block rows, width] of the block whose input
        embeddings are `noise_embedding`, after context features `target_hidden`
        [batch, context rows, K * width]; `position_ids` number the context rows, then the
        block's. With `past_key_values` (a transformers Cache) earlier context rows come
        from it, as the reference's dflash_generate keeps them."""
        if attention_mask is not None:
            raise ValueError("the DFlash block attends to all of its context: no attention_mask")
        x = noise_embedding
        context = self.hidden_norm(self.fc(target_hidden))
        cos, sin = rope_tables(position_ids, self.layers[0].self_attn.head_dim,
                               _rope_base(self.config), x.dtype)
        for layer in self.layers:
            x = layer(x, context, cos, sin, past_key_values)
        return self.norm(x)

    def compute_logits(self, hidden, output_head):
        """Logits over the target's vocabulary: the target's LM head on the drafter's output."""
        return output_head(hidden)

    @torch.inference_mode()
    def spec_generate(self, target, input_ids, max_new_tokens, stop_token_ids=None,
                      temperature=0.0):
        """Greedy speculative decoding of one prompt (batch 1) with `target`, a transformers
        causal LM: each step drafts a block from the anchor, the target verifies it, and the
        longest agreeing prefix plus the target's own next token are kept. Without caches:
        every step runs the target over the whole sequence (simple, quadratic). Returns the
        prompt and the new tokens, [1, length], as the reference's dflash_generate does."""
        if temperature != 0.0:
            raise ValueError("spec_generate here is greedy only (temperature 0)")
        if input_ids.shape[0] != 1:
            raise ValueError("spec_generate decodes one prompt at a time")
        stops = set(stop_token_ids or [])
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        prompt_length = input_ids.shape[1]
        max_length = prompt_length + max_new_tokens
        out = target(input_ids, output_hidden_states=True)
        tokens = input_ids[0].tolist() + [int(out.logits[0, -1].argmax())]
        features = self.context_features(out.hidden_states)
        start = prompt_length  # the anchor's position: the last token, not yet fed to the target
        while start + 1 < max_length and tokens[start] not in stops:
            rows = min(self.block_size, max_length - start)
            block = [tokens[start]] + [self.mask_token_id] * (rows - 1)
            if rows > 1:
                block_ids = torch.tensor([block], device=input_ids.device)
                hidden = self(position_ids=torch.arange(start + rows, device=input_ids.device)[None],
                              noise_embedding=embed(block_ids), target_hidden=features[:, :start])
                block[1:] = self.compute_logits(hidden[:, 1:], head)[0].argmax(-1).tolist()
            sequence = torch.tensor([tokens[:start] + block], device=input_ids.device)
            out = target(sequence, output_hidden_states=True)
            verified = out.logits[0, start:start + rows].argmax(-1).tolist()
            accepted = 0
            while accepted < rows - 1 and block[accepted + 1] == verified[accepted]:
                accepted += 1
            new = block[1:accepted + 1] + [verified[accepted]]
            produced = min(accepted + 1, max_length - start - 1)
            for i, token in enumerate(new[:produced]):
                if token in stops:
                    produced = i + 1
                    break
            tokens = tokens[:start + 1] + new[:produced]
            features = self.context_features(out.hidden_states)[:, :start + produced]
            start += produced
            if tokens[start] in stops:
                break
        return torch.tensor([tokens[:min(start + 1, max_length)]], device=input_ids.device)
