"""The shapes of chat data, brought to one: a list of messages with `role` and `content`
(as chat templates take them), or a plain text.

- OpenAI `messages`: [{"role": "system"|"user"|"assistant"|"tool", "content": ...}], content a
  string or a list of text parts; an assistant's `reasoning_content` (or `reasoning`, as
  vLLM writes it) is kept for templates that render it.
- ShareGPT `conversations`: [{"from": "system"|"human"|"gpt"|..., "value": ...}].
- `text`: a string, every token of which is trained.

Whatever does not fit is a Refusal whose message says which message and why.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

FORMATS = ("auto", "openai", "sharegpt", "text")
ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES = {
    "system": "system", "human": "user", "user": "user", "gpt": "assistant",
    "assistant": "assistant", "chatgpt": "assistant", "model": "assistant", "tool": "tool",
}
# The field of a record that holds each shape, in the order auto-detection tries them.
FIELD_OF_FORMAT = {"openai": "messages", "sharegpt": "conversations", "text": "text"}


class Refusal(Exception):
    """This conversation cannot be turned into a document exactly; the message says why."""


@dataclass
class Conversation:
    messages: Optional[List[Dict[str, str]]] = None  # chat: role, content (+ reasoning_content)
    text: Optional[str] = None  # plain text

    @property
    def is_chat(self) -> bool:
        return self.messages is not None


def detect_format(record: Dict[str, Any]) -> str:
    for name, field in FIELD_OF_FORMAT.items():
        if field in record:
            return name
    keys = ", ".join(sorted(map(str, record))[:8]) or "none"
    raise Refusal("no 'messages', 'conversations' or 'text' field (its fields: %s)" % keys)


def to_conversation(record: Dict[str, Any], fmt: str,
                    system_prompt: Optional[str] = None) -> Conversation:
    """The record as a Conversation. fmt: one of FORMATS. system_prompt: put first when the
    conversation has no system message of its own."""
    if fmt == "auto":
        fmt = detect_format(record)
    field = FIELD_OF_FORMAT[fmt]
    if field not in record:
        raise Refusal("no '%s' field (--format %s)" % (field, fmt))
    if fmt == "text":
        text = record[field]
        if not isinstance(text, str):
            raise Refusal("'text' is a %s, not a string" % _type(text))
        return Conversation(text=_unicode(text, "'text'"))
    items = record[field]
    if not isinstance(items, list):
        raise Refusal("'%s' is a %s, not a list of messages" % (field, _type(items)))
    parse = _openai_message if fmt == "openai" else _sharegpt_message
    messages = [parse(item, i) for i, item in enumerate(items)]
    # Some ShareGPT-style sets keep the system prompt beside the turns.
    own_system = record.get("system")
    if isinstance(own_system, str) and own_system and not _has_system(messages):
        messages.insert(0, {"role": "system", "content": own_system})
    if system_prompt is not None and not _has_system(messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    if not messages:
        raise Refusal("no message")
    return Conversation(messages=messages)


def _openai_message(item: Any, i: int) -> Dict[str, str]:
    if not isinstance(item, dict):
        raise Refusal("message %d is a %s, not an object" % (i, _type(item)))
    role = item.get("role")
    if role not in ROLES:
        raise Refusal("message %d: role %r is not one of %s" % (i, role, ", ".join(ROLES)))
    if item.get("tool_calls"):
        raise Refusal("message %d: tool calls are not supported" % i)
    message = {"role": role, "content": _content(item.get("content"), i)}
    reasoning = item.get("reasoning_content", item.get("reasoning"))
    if role == "assistant" and reasoning is not None:
        if not isinstance(reasoning, str):
            raise Refusal("message %d: its reasoning is a %s, not a string" % (i, _type(reasoning)))
        message["reasoning_content"] = _unicode(reasoning, "message %d: its reasoning" % i)
    return message


def _sharegpt_message(item: Any, i: int) -> Dict[str, str]:
    if not isinstance(item, dict):
        raise Refusal("message %d is a %s, not an object" % (i, _type(item)))
    if "from" not in item and "role" in item:  # ShareGPT files written with OpenAI keys
        return _openai_message(item, i)
    speaker = item.get("from")
    role = SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
    if role is None:
        raise Refusal("message %d: 'from' %r is not one of %s"
                      % (i, speaker, ", ".join(SHAREGPT_ROLES)))
    return {"role": role, "content": _content(item.get("value"), i)}


def _content(content: Any, i: int) -> str:
    if isinstance(content, str):
        return _unicode(content, "message %d: its content" % i)
    if isinstance(content, list):  # OpenAI content parts: text only
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else _type(part)
                raise Refusal("message %d: a content part of type %r (only text is supported)"
                              % (i, kind))
            texts.append(part["text"])
        return _unicode("".join(texts), "message %d: its content" % i)
    raise Refusal("message %d: its content is a %s, not a string" % (i, _type(content)))


def _unicode(text: str, what: str) -> str:
    """JSON's escapes can spell a lone surrogate, which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise Refusal("%s is not valid Unicode (a lone surrogate at character %d)"
                      % (what, e.start)) from e
    return text


def _has_system(messages: List[Dict[str, str]]) -> bool:
    return any(m["role"] == "system" for m in messages)


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__
