"""The files that serving engines and other drafter trainers write when the target
regenerates a dataset's answers, brought to what `prepare` encodes:

- OpenAI batch files (vLLM's `run_batch`, SGLang's and OpenAI's `/v1/batches`): the output
  records `{"custom_id", "response": {"status_code", "body": {"choices": [{"message"}]}},
  "error"}` carry the answer only; the request file `{"custom_id", "body": {"messages"}}`
  holds the conversation it answers. Joined by custom_id, the answer becomes the last
  assistant turn, the one trained.
- SpecForge's `scripts/regenerate_train_data.py`: `{"id", "conversations": [{"role",
  "content", "reasoning_content"?}], "status"}`, every assistant turn the target's; its
  `_error`/`_skipped` files hold `"status": "error"|"skipped"` with an `"error"`. Its
  `expand_reasoning_conversations.py` writes one row per assistant turn
  (`assistant_turn_index`), of which only the last turn is that row's to train.
- speculators' `scripts/response_regeneration/script.py` (and its `prepare_data.py`
  input): `{"input_ids", "loss_mask", "text"?}`, the engine's own token ids with the
  generated ones marked; its `.errors.jsonl` rows hold `metadata.error`.

Each shape becomes a Conversation (conversations.py) or a Refusal that names why.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .conversations import Conversation, Refusal, _openai_message, _type, parse_messages


# -- SpecForge ------------------------------------------------------------------------

def check_status(record: Dict[str, Any]) -> None:
    """SpecForge marks each row: "success", or "error" / "skipped" with the reason."""
    status = record.get("status")
    if status is None or status == "success":
        return
    reason = record.get("error")
    raise Refusal("the regeneration's status is %r%s: not an answer of the target"
                  % (status, ": %s" % reason if isinstance(reason, str) and reason else ""))


def specforge_conversation(record: Dict[str, Any], system_prompt: Optional[str]) -> Conversation:
    """`--format specforge`: OpenAI messages under `conversations`."""
    check_status(record)
    items = record.get("conversations")
    if not isinstance(items, list):
        raise Refusal("'conversations' is a %s, not a list of messages (--format specforge)"
                      % _type(items))
    for i, item in enumerate(items):
        if isinstance(item, dict) and "role" not in item:
            raise Refusal("message %d has no 'role' (SpecForge writes role/content; "
                          "from/value is --format sharegpt)" % i)
    conversation = parse_messages(record, items, _openai_message, system_prompt)
    conversation.train_turns = event_row_turns(record)
    return conversation


def event_row_turns(record: Dict[str, Any]) -> Optional[str]:
    """A row of SpecForge's expand_reasoning_conversations.py trains its last turn; the
    earlier ones are history that their own rows train."""
    return "last" if isinstance(record.get("assistant_turn_index"), int) else None


# -- speculators ----------------------------------------------------------------------

def is_token_row(record: Dict[str, Any]) -> bool:
    return "input_ids" in record and "loss_mask" in record


def token_row(record: Dict[str, Any]) -> Conversation:
    """`--format speculators`: token ids and a 0/1 mask of the same length, kept as they
    are (the engine's tokens), with the review text when the row has one."""
    error = (record.get("metadata") or {}).get("error") if isinstance(record.get("metadata"),
                                                                        dict) else None
    if error:
        raise Refusal("the regeneration failed on it: %s" % error)
    ids, mask = record.get("input_ids"), record.get("loss_mask")
    for name, value in (("input_ids", ids), ("loss_mask", mask)):
        if not isinstance(value, list):
            raise Refusal("'%s' is a %s, not a list" % (name, _type(value)))
    if len(ids) != len(mask):
        raise Refusal("'input_ids' has %d tokens and 'loss_mask' %d flags"
                      % (len(ids), len(mask)))
    for k, t in enumerate(ids):
        if type(t) is not int or t < 0:  # bool is an int: refused too
            raise Refusal("'input_ids'[%d] is %r, not a token id" % (k, t))
    for k, f in enumerate(mask):
        if type(f) is not int or f not in (0, 1):
            raise Refusal("'loss_mask'[%d] is %r, not 0 or 1" % (k, f))
    text = record.get("text")
    return Conversation(tokens=list(ids), flags=list(mask),
                        review_text=text if isinstance(text, str) else None)


# -- OpenAI batch files -----------------------------------------------------------------

def is_batch_request(record: Any) -> bool:
    return (isinstance(record, dict) and "custom_id" in record
            and isinstance(record.get("body"), dict) and "response" not in record)


def is_batch_output(record: Dict[str, Any]) -> bool:
    return "custom_id" in record and "response" in record


@dataclass
class BatchRequests:
    """The requests of the batch input files, by custom_id, and which were answered."""
    by_id: Dict[str, Tuple[Any, Any]] = field(default_factory=dict)  # id: (record, body)
    duplicates: Dict[str, List[str]] = field(default_factory=dict)  # id: where they are
    answered: Dict[str, str] = field(default_factory=dict)  # id: where its answer is

    def add(self, custom_id: Any, record: Any, body: Any) -> Optional[str]:
        """Records one request (record: its records.Record); the reason it is unusable,
        or None."""
        if not isinstance(custom_id, str):
            return "'custom_id' is a %s, not a string" % _type(custom_id)
        if custom_id in self.by_id:
            first = self.by_id[custom_id][0].where()
            self.duplicates.setdefault(custom_id, [first]).append(record.where())
            return "custom_id %r is also the request at %s" % (custom_id, first)
        self.by_id[custom_id] = (record, body)
        return None

    def unanswered(self) -> List[Tuple[Any, str]]:
        """(record, custom_id) of each request no output record answered."""
        return [(record, cid) for cid, (record, _) in self.by_id.items()
                if cid not in self.answered and cid not in self.duplicates]


def batch_conversation(record: Dict[str, Any], where: str, requests: BatchRequests,
                       system_prompt: Optional[str]) -> Conversation:
    """A batch output record joined to its request: the request's messages, then the
    response's message as the last assistant turn, the only one trained."""
    cid = record.get("custom_id")
    if not isinstance(cid, str):
        raise Refusal("'custom_id' is a %s, not a string" % _type(cid))
    response, error = record.get("response"), record.get("error")
    if error:
        raise Refusal("custom_id %r: the request failed: %s" % (cid, _short(error)))
    if not isinstance(response, dict):
        raise Refusal("custom_id %r: 'response' is a %s, not an object" % (cid, _type(response)))
    status = response.get("status_code", 200)
    body = response.get("body")
    if status != 200:
        raise Refusal("custom_id %r: the request failed with HTTP %s: %s"
                      % (cid, status, _short(body)))
    if cid in requests.duplicates:
        raise Refusal("custom_id %r names several requests (%s): which one it answers is "
                      "unknown" % (cid, ", ".join(requests.duplicates[cid])))
    if cid not in requests.by_id:
        raise Refusal("custom_id %r: no request of that id in the --dataset files (give the "
                      "batch input file beside its output)" % cid)
    if cid in requests.answered:
        raise Refusal("custom_id %r was answered already, at %s" % (cid, requests.answered[cid]))
    requests.answered[cid] = where
    request_record, request = requests.by_id[cid]
    request_where = request_record.where()
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        raise Refusal("custom_id %r: the response has no 'choices' (a chat completion's)" % cid)
    if len(choices) != 1:
        raise Refusal("custom_id %r: %d choices (n > 1): one answer per request is read"
                      % (cid, len(choices)))
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise Refusal("custom_id %r: the choice has no 'message' (a completions response, "
                      "not a chat completion's?)" % cid)
    messages = _request_messages(cid, request_where, request)
    answer = dict(message)
    answer.setdefault("role", "assistant")
    if answer["role"] != "assistant":
        raise Refusal("custom_id %r: the response's message is the %r's" % (cid, answer["role"]))
    if answer.get("content") is None and not answer.get("tool_calls"):
        answer["content"] = ""
    conversation = parse_messages({}, messages + [answer], _openai_message, system_prompt)
    conversation.train_turns = "last"
    conversation.template_kwargs = request.get("chat_template_kwargs") or {}
    return conversation


def _request_messages(cid: str, where: str, request: Dict[str, Any]) -> List[Any]:
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refusal("custom_id %r: its request (%s) has no 'messages' (a chat completion "
                      "request's)" % (cid, where))
    if request.get("tools"):
        raise Refusal("custom_id %r: its request (%s) offers tools, which the template "
                      "renders and the answer may call: not supported" % (cid, where))
    if request.get("continue_final_message") or request.get("add_generation_prompt") is False \
            or request.get("echo"):
        raise Refusal("custom_id %r: its request (%s) continues its last message instead of "
                      "answering it" % (cid, where))
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") == "assistant":
        raise Refusal("custom_id %r: its request (%s) ends with an assistant message"
                      % (cid, where))
    kwargs = request.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise Refusal("custom_id %r: its request's chat_template_kwargs is a %s"
                      % (cid, _type(kwargs)))
    return list(messages)


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
