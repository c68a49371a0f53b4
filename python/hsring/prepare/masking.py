"""A conversation to one document: the template's rendering of the whole conversation,
tokenized, and one flag per token (1: the drafter learns it, the assistant's text).

The document is always tokenize(render(conversation)), rendered once: never the
concatenation of renderings of prefixes, which some templates do not extend (Qwen3 renders
the last assistant turn with a `<think>` block the earlier ones lack). The trained text is
found in the rendering as character spans, then mapped to tokens by the tokenizer's
offsets; a token that straddles the edge of a span refuses the conversation.

- With `{% generation %}` tags the template itself marks the assistant's text (the spans
  transformers records while rendering, checked against the tokenizer's own
  `return_assistant_tokens_mask`).
- Otherwise each assistant turn's content is located in the rendering by text. Every
  message's content is an anchor, in order; the leftmost and the rightmost placements of
  the anchors must agree on each assistant turn, which proves its place unique (any
  placement of the anchors in order lies between those two). A turn's span is its content,
  extended over the whitespace and the stop token (the model folder's eos) that end it.

`<think>...</think>` blocks are context unless train_thinking: the reasoning the template
renders before an assistant's answer then counts with the answer.

An engine's tokens (speculators' rows) are kept as they are, with their mask: checked
against the text the row says they decode to, and with the reasoning block taken out of
the mask by its marker tokens unless train_thinking.
"""

import bisect
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .conversations import Conversation, Refusal
from .model_folder import ModelFolder

try:  # the spans behind return_assistant_tokens_mask (transformers >= 4.45)
    from transformers.utils.chat_template_utils import render_jinja_template
except ImportError:  # pragma: no cover - older or newer layouts: the mask alone
    render_jinja_template = None

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
THINK_BLOCK = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE) + r"\s*",
                         re.DOTALL)

Span = Tuple[int, int]  # [start, end) in characters of the rendering


@dataclass
class Document:
    tokens: List[int]
    flags: Optional[List[int]]  # None: every token trained (plain text, prompts)
    route: str  # "text", "generation-tags", "offsets", "tokens" or "prompt"


class Encoder:
    """Encodes conversations with one model folder's tokenizer and template."""

    def __init__(self, model: ModelFolder, train_thinking: bool = False,
                 train_turns: str = "all", template_kwargs: Optional[Dict] = None):
        if train_turns not in ("auto", "all", "last"):
            raise ValueError("train_turns: 'auto', 'all' or 'last'")
        self.model = model
        self.tokenizer = model.tokenizer
        self.train_thinking = train_thinking
        self.train_turns = train_turns
        self.template_kwargs = dict(template_kwargs or {})

    # -- training documents ---------------------------------------------------------

    def encode(self, conversation: Conversation) -> Document:
        if conversation.is_tokens:
            return self._encode_tokens(conversation)
        if not conversation.is_chat:
            return Document(self.tokenizer(conversation.text)["input_ids"], None, "text")
        self._check_template_kwargs(conversation)
        messages = conversation.messages
        if not any(m["role"] == "assistant" for m in messages):
            raise Refusal("no assistant turn to train on")
        # "auto": what the data says is the target's (the last turn of a batch answer or
        # of SpecForge's per-turn rows), else every turn.
        turns = self.train_turns if self.train_turns != "auto" else \
            (conversation.train_turns or "all")
        text = self.render(messages, add_generation_prompt=False)
        tokens, offsets = self._tokenize(text)
        if self.model.has_generation_tags:
            spans = self._generation_spans(messages, text, tokens, offsets)
            route = "generation-tags"
        else:
            spans = self._content_spans(messages, text, tokens, offsets)
            route = "offsets"
        spans = spans[-1:] if turns == "last" else spans
        if not self.train_thinking:
            spans = subtract(spans, [m.span() for m in THINK_BLOCK.finditer(text)])
        flags = flags_from_spans(text, offsets, spans)
        if not any(flags):
            raise Refusal("no token of an assistant's text is left to train")
        return Document(tokens, flags, route)

    def render(self, messages: List[Dict[str, str]], add_generation_prompt: bool) -> str:
        if self.model.chat_template is None:
            raise TemplateMissing("%s has no chat template (tokenizer_config.json's "
                                  "chat_template, or chat_template.jinja)" % self.model.path)
        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                **self.template_kwargs)
        except Exception as e:  # jinja2's TemplateError, raise_exception(), a bad field...
            raise Refusal("the chat template fails on it: %s: %s" % (type(e).__name__, e)) from e

    def _tokenize(self, text: str) -> Tuple[List[int], List[Span]]:
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = [tuple(o) for o in encoding["offset_mapping"]]
        check_offsets_cover(text, offsets)
        return list(encoding["input_ids"]), offsets

    def _generation_spans(self, messages, text, tokens, offsets) -> List[Span]:
        """The template's own `{% generation %}` spans, checked against the tokenizer's mask."""
        own = self.tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
            **self.template_kwargs)
        if list(own["input_ids"]) != tokens:
            raise Refusal("the tokenizer's rendering differs from tokenize(render(conversation))")
        mask = list(own["assistant_masks"])
        if render_jinja_template is not None:
            rendered, indices = render_jinja_template(
                conversations=[messages], chat_template=self.model.chat_template,
                return_assistant_tokens_mask=True, add_generation_prompt=False,
                **{**self.tokenizer.special_tokens_map, **self.template_kwargs})
            if rendered[0] != text:
                raise Refusal("the template renders it differently twice (does it use the time?)")
            spans = [(int(s), int(e)) for s, e in indices[0] if e > s]
            # A token straddling a tag's edge raises here; transformers' mask takes it whole.
            if flags_from_spans(text, offsets, spans) != mask:
                raise Refusal("the tokenizer's assistant mask differs from the template's spans")
        else:
            spans = runs_to_spans(mask, offsets)
        if not spans:
            raise Refusal("the template's {% generation %} tags mark no text")
        return spans

    def _content_spans(self, messages, text, tokens, offsets) -> List[Span]:
        anchors = place_anchors(text, messages,
                                lambda i, needle: self._place_by_sentinel(messages, i, text))
        starts = {a: k for k, (a, b) in enumerate(offsets) if b > a}
        spans = []
        previous_end = 0
        for anchor in anchors:
            begin, end = anchor.start, anchor.end
            if anchor.role == "assistant":
                if self.train_thinking:  # the template's rendering of the reasoning
                    begin = think_block_before(text, previous_end, begin)
                spans.append((begin, self._through_stop_token(text, end, tokens, offsets, starts)))
            previous_end = anchor.end
        return spans

    def _place_by_sentinel(self, messages, i: int, text: str) -> Optional[int]:
        """Where message i's content starts, from a second rendering with a unique text in
        its place: exact when everything the template writes before it is the same."""
        sentinel = "\ue000hsring-anchor-%d\ue001" % i
        changed = [dict(m) for m in messages]
        changed[i]["content"] = sentinel
        try:
            other = self.render(changed, add_generation_prompt=False)
        except Refusal:
            return None
        at = other.find(sentinel)
        return at if at >= 0 and other[:at] == text[:at] else None

    def _through_stop_token(self, text: str, end: int, tokens, offsets, starts) -> int:
        """The end of the turn: past the whitespace and the stop token (model folder's eos)
        that directly follow its content, when one does; the model writes those too."""
        at = end
        while at < len(text) and text[at].isspace():
            at += 1
        k = starts.get(at)
        if k is not None and tokens[k] in self.model.stop_token_ids:
            return offsets[k][1]
        return end

    def _check_template_kwargs(self, conversation: Conversation) -> None:
        """The engine rendered the prompt with its request's template variables; the
        rendering here must use the same, or the document is not what the target read."""
        used = conversation.template_kwargs
        if used is not None and dict(used) != self.template_kwargs:
            raise Refusal("its request was rendered with chat_template_kwargs %s, this run with "
                          "%s: give the request's with --chat-template-kwargs"
                          % (_json(used), _json(self.template_kwargs)))

    # -- an engine's tokens -------------------------------------------------------------

    def _encode_tokens(self, conversation: Conversation) -> Document:
        tokens, flags = conversation.tokens, list(conversation.flags)
        if not tokens:
            raise Refusal("'input_ids' is empty")
        top = max(tokens)
        if top >= self.model.vocab_size:  # before decoding: the tokenizer would fail on it
            raise Refusal("token %d is outside the model's vocabulary of %d"
                          % (top, self.model.vocab_size))
        if conversation.review_text is not None:
            decoded = self.tokenizer.decode(tokens, skip_special_tokens=False)
            if decoded != conversation.review_text:
                at = next((k for k, (a, b) in enumerate(zip(decoded, conversation.review_text))
                           if a != b), min(len(decoded), len(conversation.review_text)))
                raise Refusal("its tokens decode with this model's tokenizer to another text "
                              "than its 'text' (from character %d: %r, not %r): written for "
                              "another tokenizer?" % (at, decoded[at:at + 20],
                                                      conversation.review_text[at:at + 20]))
        if not any(flags):
            raise Refusal("'loss_mask' marks no token")
        if not self.train_thinking:
            flags = self._untrain_reasoning(tokens, flags)
            if not any(flags):
                raise Refusal("no token is left to train once its <think> block is context "
                              "(--train-thinking trains it)")
        return Document(list(tokens), flags, "tokens")

    def _untrain_reasoning(self, tokens: List[int], flags: List[int]) -> List[int]:
        """flags less the `<think>...</think>` blocks and the whitespace right after them,
        as the rendering route leaves them out. The block is found by its marker tokens
        (one token each where the tokenizer has them, as Qwen3's and DeepSeek-R1's do);
        a block may open in the prompt (a generation prompt ending in `<think>`)."""
        vocab = self.tokenizer.get_vocab()
        opening, closing = vocab.get(THINK_OPEN), vocab.get(THINK_CLOSE)
        flags = list(flags)
        inside = after_close = False
        for k, t in enumerate(tokens):
            if t == opening or t == closing:
                inside, after_close = t == opening, t == closing
                flags[k] = 0
            elif inside:
                flags[k] = 0
            elif after_close and flags[k] and not self.tokenizer.decode([t]).strip():
                flags[k] = 0
            else:
                after_close = False
        for start, end in _runs(flags):
            text = self.tokenizer.decode(tokens[start:end], skip_special_tokens=False)
            if THINK_OPEN in text or THINK_CLOSE in text:
                raise Refusal("its trained tokens spell %s or %s in several tokens: the "
                              "reasoning cannot be told apart (--train-thinking trains it "
                              "all)" % (THINK_OPEN, THINK_CLOSE))
        return flags

    # -- prompts ------------------------------------------------------------------------

    def encode_prompt(self, conversation: Conversation) -> Document:
        """The conversation up to and including its last user turn, rendered with the
        generation prompt: what the target is asked to continue. No mask."""
        if conversation.is_tokens:  # what the engine's target was given: up to its answer
            first = next((k for k, f in enumerate(conversation.flags) if f), None)
            if not first:
                raise Refusal("'loss_mask' marks no generated token after a prompt")
            return Document(list(conversation.tokens[:first]), None, "prompt")
        if not conversation.is_chat:
            return Document(self.tokenizer(conversation.text)["input_ids"], None, "prompt")
        self._check_template_kwargs(conversation)
        messages = conversation.messages
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if not users:
            raise Refusal("no user turn to prompt with")
        text = self.render(messages[:users[-1] + 1], add_generation_prompt=True)
        return Document(list(self.tokenizer(text, add_special_tokens=False)["input_ids"]), None,
                        "prompt")


class TemplateMissing(Exception):
    """The model folder has no chat template, and the data is chat: nothing can be done."""


@dataclass
class Anchor:
    message: int
    role: str
    start: int
    end: int


def needles(message: Dict[str, str]) -> List[str]:
    """What to look for in the rendering, in order of preference: the content verbatim,
    then as templates commonly rewrite it (the answer after `</think>`, stripped)."""
    content = message["content"]
    found = [content, content.strip()]
    if message["role"] == "assistant" and THINK_CLOSE in content:
        answer = content.split(THINK_CLOSE)[-1]
        found += [answer.lstrip("\n"), answer.strip()]
    unique = []
    for n in found:
        if n and n not in unique:
            unique.append(n)
    return unique


def place_anchors(text: str, messages: Sequence[Dict[str, str]],
                  resolve: Optional[Callable[[int, str], Optional[int]]] = None) -> List[Anchor]:
    """Places every message's content in the rendering, in order, and proves the place of
    each assistant turn unique. A user or system content the template does not render
    verbatim is left out of the anchors; an assistant content, never. resolve(message,
    needle): where an assistant content whose place is ambiguous really is, or None."""
    chosen = []  # (message index, role, needle)
    for i, m in enumerate(messages):
        if m["role"] not in ("assistant",) + _CONTEXT_ROLES:
            continue
        candidates = [n for n in needles(m) if n in text]
        if m["role"] == "assistant":
            if not needles(m):
                raise Refusal("assistant turn (message %d) has no content to train" % i)
            if not candidates:
                raise Refusal("assistant turn (message %d): its content is not in the "
                              "template's rendering verbatim (the template rewrites it)" % i)
        if candidates:
            chosen.append((i, m["role"], candidates[0]))
    # Leftmost placement, dropping a context anchor that cannot follow the previous one.
    position, kept = 0, []
    for i, role, needle in chosen:
        at = text.find(needle, position)
        if at < 0:
            if role == "assistant":
                raise Refusal("assistant turn (message %d): its content is not in the "
                              "rendering after the previous message's" % i)
            continue
        kept.append((i, role, needle))
        position = at + len(needle)
    # Rightmost placement of the same anchors: it exists, since the leftmost does.
    right, limit = [0] * len(kept), len(text)
    for k in range(len(kept) - 1, -1, -1):
        needle = kept[k][2]
        right[k] = text.rfind(needle, 0, limit)
        limit = right[k]
    # Each anchor after the ones placed: its leftmost place from there, its rightmost place
    # from the rightmost pass; the same, it is unique.
    anchors, position = [], 0
    for k, (i, role, needle) in enumerate(kept):
        a, b = text.find(needle, position), right[k]
        if role == "assistant" and a != b:
            at = resolve(i, needle) if resolve else None
            if at is None or not (a <= at <= b and text.startswith(needle, at)):
                raise Refusal("assistant turn (message %d): its content occurs at characters "
                              "%d and %d of the rendering; which one is the turn is ambiguous"
                              % (i, a, b))
            a = at
        anchors.append(Anchor(i, role, a, a + len(needle)))
        position = a + len(needle)
    return anchors


_CONTEXT_ROLES = ("system", "user", "tool")


def think_block_before(text: str, previous_end: int, begin: int) -> int:
    """Where the reasoning block that the template put right before an answer starts (the
    answer's own start when there is none): `<think>...</think>` then whitespace only."""
    glue = text[previous_end:begin]
    if not glue.rstrip().endswith(THINK_CLOSE):
        return begin
    opening = glue.rfind(THINK_OPEN)
    return previous_end + opening if opening >= 0 else begin


def check_offsets_cover(text: str, offsets: Sequence[Span]) -> None:
    """The tokens' offsets must tile the text: no character outside every token (a
    tokenizer that trims offsets, or drops characters, hides which side a token is on)."""
    reach = 0
    for k, (a, b) in enumerate(offsets):
        if a > reach or b < a:
            raise Refusal("the tokenizer's offsets leave characters %d-%d out of every token "
                          "(token %d): the mask cannot be placed exactly" % (reach, a, k))
        reach = max(reach, b)
    if reach != len(text):
        raise Refusal("the tokenizer's offsets end at character %d of %d" % (reach, len(text)))


def flags_from_spans(text: str, offsets: Sequence[Span], spans: Sequence[Span]) -> List[int]:
    """1 for a token inside a span, 0 outside every span; a token across a span's edge
    raises Refusal. spans: sorted, disjoint."""
    starts = [s for s, _ in spans]
    flags = []
    for k, (a, b) in enumerate(offsets):
        i = bisect.bisect_right(starts, a) - 1
        inside = i >= 0 and spans[i][0] <= a and (b <= spans[i][1] if b > a else a < spans[i][1])
        overlaps = (i >= 0 and spans[i][1] > a) or (i + 1 < len(spans) and spans[i + 1][0] < b)
        if overlaps and not inside:
            edge = spans[i][1] if i >= 0 and spans[i][1] > a else spans[i + 1][0]
            raise Refusal("token %d (%r, characters %d-%d) straddles the edge of the trained "
                          "text at character %d" % (k, text[a:b], a, b, edge))
        flags.append(1 if inside else 0)
    return flags


def subtract(spans: Sequence[Span], holes: Sequence[Span]) -> List[Span]:
    """spans less the holes that begin inside them, sorted and disjoint. (A reasoning block
    the template writes before a turn's content is not in its span; the whitespace after
    it may be the content's own.)"""
    out = []
    for s, e in spans:
        pieces = [(s, e)]
        for hs, he in holes:
            if not s <= hs < e:
                continue
            pieces = [p for a, b in pieces
                      for p in ((a, min(b, hs)), (max(a, he), b)) if p[1] > p[0]]
        out.extend(pieces)
    return sorted(out)


def _runs(flags: Sequence[int]) -> List[Span]:
    """[start, end) of each run of 1s."""
    runs, start = [], None
    for k, f in enumerate(list(flags) + [0]):
        if f and start is None:
            start = k
        elif not f and start is not None:
            runs.append((start, k))
            start = None
    return runs


def _json(value) -> str:
    import json
    return json.dumps(value, sort_keys=True)


def runs_to_spans(mask: Sequence[int], offsets: Sequence[Span]) -> List[Span]:
    """The character spans of runs of 1s in a token mask."""
    spans, k = [], 0
    while k < len(mask):
        if mask[k]:
            j = k
            while j + 1 < len(mask) and mask[j + 1]:
                j += 1
            spans.append((offsets[k][0], offsets[j][1]))
            k = j + 1
        else:
            k += 1
    return spans
