"""What `prepare` needs from a model folder: its fast tokenizer with the chat template, the
vocabulary size the shards declare, and the tokens that end an assistant's turn."""

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, List, Optional, Set

from transformers import AutoTokenizer

# transformers' own test for a template that marks the assistant's text
# (chat_template_utils.render_jinja_template).
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


class ModelFolderError(Exception):
    """The model folder cannot serve: the message names it and what is missing."""


@dataclass
class ModelFolder:
    path: str
    tokenizer: Any
    vocab_size: int  # config.json's vocab_size (the embedding's rows), else the tokenizer's
    stop_token_ids: Set[int] = field(default_factory=set)

    @property
    def chat_template(self) -> Optional[str]:
        template = self.tokenizer.chat_template
        return template if isinstance(template, str) else None

    @property
    def has_generation_tags(self) -> bool:
        return bool(self.chat_template and GENERATION_TAG.search(self.chat_template))


def load_model_folder(path: str) -> ModelFolder:
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "tokenizer.json")):
        raise ModelFolderError("%s: no tokenizer.json (the model's fast tokenizer)" % path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # transformers raises OSError, ValueError, KeyError... by cause
        raise ModelFolderError("%s: the tokenizer cannot be loaded: %s" % (path, e)) from e
    if not getattr(tokenizer, "is_fast", False):
        raise ModelFolderError("%s: the tokenizer is not a fast (tokenizers) one: its offsets "
                               "are needed to place the loss mask" % path)
    config = _json(path, "config.json")
    vocab_size = _vocab_size(config) or len(tokenizer)
    stops = set(_ids(config.get("eos_token_id")))
    stops |= set(_ids(_json(path, "generation_config.json").get("eos_token_id")))
    if tokenizer.eos_token_id is not None:
        stops.add(int(tokenizer.eos_token_id))
    return ModelFolder(path, tokenizer, vocab_size, stops)


def _vocab_size(config: dict) -> int:
    for where in (config, config.get("text_config") or {}):  # multimodal wrappers nest it
        size = where.get("vocab_size")
        if isinstance(size, int) and size > 0:
            return size
    return 0


def _ids(value: Any) -> List[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def _json(folder: str, name: str) -> dict:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise ModelFolderError("%s: cannot be read as JSON: %s" % (path, e)) from e
    return value if isinstance(value, dict) else {}
