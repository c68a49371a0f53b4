"""`hsring data prepare` (python3 -m hsring.prepare): chat datasets to token shards with a
model's own tokenizer and chat template, the loss mask on the assistant's tokens.

Exit codes: 0 shards written; 1 nothing to write (every conversation dropped or refused),
or a refusal under --strict; 2 bad flags, a dataset file that cannot be read, an unusable
model or output folder. (`hsring data prepare` exits 4 itself when Python or a module is
missing.) Nothing is left under -o unless the run succeeds.
"""

import argparse
import itertools
import json
import os
import sys
import time
from typing import List, Optional

from .conversations import FORMATS, Refusal, to_conversation
from .engines import BatchRequests, is_batch_request
from .output import OutputError, ShardSink, Summary, check_output_folder
from .records import InputError, Record, read_records

# masking and model_folder import transformers (seconds): only once the flags are good.

PROG = "hsring data prepare"
EXIT_NOTHING, EXIT_USAGE = 1, 2
DEFAULT_SHARD_TOKENS = 1 << 24
PROGRESS_SECONDS = 2.0


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Turn chat datasets into token shards with a model's own tokenizer and "
                    "chat template, the loss mask on the assistant's tokens "
                    "(docs/data-format.md, 'Chat data').")
    p.add_argument("--model", required=True,
                   help="the model's Hugging Face folder (tokenizer.json, tokenizer_config.json "
                        "with the chat template, config.json with vocab_size)")
    p.add_argument("--dataset", required=True, nargs="+", action="extend", metavar="FILE",
                   help="JSON Lines, JSON (an array of records) or Parquet files; repeatable")
    p.add_argument("-o", "--out", required=True, help="folder for the shards (new or empty)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="the records' shape: openai ('messages': role/content), sharegpt "
                        "('conversations': from/value), text ('text', every token trained); "
                        "what the target regenerated: openai-batch (vLLM's or SGLang's batch "
                        "output, joined by custom_id to the batch input file, also given), "
                        "specforge (regenerate_train_data.py's 'conversations'), speculators "
                        "('input_ids' + 'loss_mask'); auto: by each record's fields (default)")
    p.add_argument("--max-length", type=_non_negative, default=0, metavar="N",
                   help="longest document in tokens (0: no limit)")
    p.add_argument("--overflow", choices=("truncate", "drop"), default="truncate",
                   help="a longer document: keep its first N tokens (default) or drop it; "
                        "--prompts-only always drops (a cut prompt loses its generation prompt)")
    p.add_argument("--system-prompt", metavar="TEXT",
                   help="system message for conversations that have none")
    p.add_argument("--train-thinking", action="store_true",
                   help="train on the <think>...</think> blocks the template renders in the "
                        "assistant's turns (default: context only)")
    p.add_argument("--train-turns", choices=("auto", "all", "last"), default="auto",
                   help="which assistant turns are trained: all, or the last one (regenerated "
                        "data whose last turn alone is the target's); auto (default): the last "
                        "for a batch answer and a row of SpecForge's per-turn expansion, else all")
    p.add_argument("--prompts-only", action="store_true",
                   help="write prompts, not training data: each conversation up to its last "
                        "user turn with the generation prompt, no mask (for hsring data "
                        "generate --data and hsring eval)")
    p.add_argument("--chat-template-kwargs", type=_json_object, default={}, metavar="JSON",
                   help='extra template variables, e.g. \'{"enable_thinking": false}\'')
    p.add_argument("--shard-tokens", type=_positive, default=DEFAULT_SHARD_TOKENS, metavar="N",
                   help="most tokens in one shard (default %d)" % DEFAULT_SHARD_TOKENS)
    p.add_argument("--summary-json", metavar="PATH", help="write the summary as JSON here too")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first refused conversation (exit 1) instead of skipping it")
    return p.parse_args(argv)


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("%s is negative" % text)
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("%s is not positive" % text)
    return value


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError("not JSON: %s" % e)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("a JSON object is needed, not %s" % text)
    return value


class StrictStop(Exception):
    pass


class Run:
    """One `prepare`: reads the records, encodes them, feeds the shard sink, counts."""

    def __init__(self, args: argparse.Namespace, model, sink: ShardSink):
        from .masking import Encoder
        self.args = args
        self.model = model
        self.sink = sink
        self.encoder = Encoder(model, train_thinking=args.train_thinking,
                               train_turns=args.train_turns,
                               template_kwargs=args.chat_template_kwargs)
        self.summary = Summary(args.model, model.vocab_size,
                               "prompts-only" if args.prompts_only else "train")
        self.next_progress = time.monotonic() + PROGRESS_SECONDS
        self.requests = BatchRequests()
        self.request_files: List[str] = []

    def read_batch_requests(self, paths: List[str]) -> None:
        """The batch input files among the datasets (their first record a request), read
        first, so that the output records can be joined to them in any file order."""
        if self.args.format not in ("auto", "openai-batch"):
            return
        for path in paths:
            records = read_records(path)
            first = next(records, None)
            if first is None or first.error is not None or not is_batch_request(first.value):
                continue
            self.request_files.append(path)
            self.summary.files.append(path)
            for record in itertools.chain([first], records):
                self.summary.batch_requests += 1
                if record.error is not None:
                    self.refuse(record, record.error)
                elif not is_batch_request(record.value):
                    self.refuse(record, "not a batch request (custom_id, body), in a file of "
                                        "batch requests")
                else:
                    reason = self.requests.add(record.value.get("custom_id"), record,
                                               record.value["body"])
                    if reason is not None:
                        self.refuse(record, reason)

    def unanswered_requests(self) -> None:
        for record, custom_id in self.requests.unanswered():
            self.drop(record, "custom_id %r: no answer in the batch output files given"
                      % custom_id)

    def file(self, path: str) -> None:
        if path in self.request_files:
            return
        self.summary.files.append(path)
        for record in read_records(path):
            self.summary.conversations += 1
            self.record(record)
            if time.monotonic() >= self.next_progress:
                self.next_progress = time.monotonic() + PROGRESS_SECONDS
                s = self.summary
                print("%s: %s: %d conversations, %d documents, %d tokens, %d refused"
                      % (PROG, record.where(), s.conversations, s.documents, s.tokens,
                         len(s.refused)), file=sys.stderr, flush=True)

    def record(self, record: Record) -> None:
        if record.error is not None:
            return self.refuse(record, record.error)
        try:
            conversation = to_conversation(record.value, self.args.format,
                                           self.args.system_prompt, where=record.where(),
                                           requests=self.requests)
            encode = self.encoder.encode_prompt if self.args.prompts_only else self.encoder.encode
            doc = encode(conversation)
        except Refusal as e:
            return self.refuse(record, str(e))
        tokens, flags = doc.tokens, doc.flags
        if not tokens:
            return self.drop(record, "no token")
        top = max(tokens)
        if top >= self.model.vocab_size:
            return self.refuse(record, "token %d is outside the model's vocabulary of %d"
                               % (top, self.model.vocab_size))
        limit = self.args.max_length
        if limit and len(tokens) > limit:
            if self.args.prompts_only or self.args.overflow == "drop":
                return self.drop(record, "%d tokens, over --max-length %d" % (len(tokens), limit))
            tokens = tokens[:limit]
            flags = flags[:limit] if flags is not None else None
            if flags is not None and not any(flags):
                return self.drop(record, "no trained token within the first %d (--max-length)"
                                 % limit)
            self.summary.truncated += 1
        self.sink.add(tokens, flags)
        self.summary.count(len(tokens), len(tokens) if flags is None else sum(flags), doc.route)

    def refuse(self, record: Record, reason: str) -> None:
        if self.args.strict:
            raise StrictStop("%s: refused: %s" % (record.where(), reason))
        self.summary.refused.append(_entry(record, reason))

    def drop(self, record: Record, reason: str) -> None:
        self.summary.dropped.append(_entry(record, reason))


def _entry(record: Record, reason: str) -> dict:
    return {"where": record.where(), "file": record.path, "record": record.index,
            "line": record.line, "reason": reason}


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    from .masking import TemplateMissing
    from .model_folder import ModelFolderError, load_model_folder
    _quiet_transformers()

    def fail(message: str, code: int) -> int:
        print("%s: error: %s" % (PROG, message), file=sys.stderr)
        return code

    for path in args.dataset:
        if not os.path.isfile(path):
            return fail("--dataset %s: %s" % (path, "a folder: name its files" if
                                               os.path.isdir(path) else "no such file"),
                        EXIT_USAGE)
    try:
        check_output_folder(args.out)
        model = load_model_folder(args.model)
        sink = ShardSink(args.out, model.vocab_size, args.shard_tokens)
    except (OutputError, ModelFolderError) as e:
        return fail(str(e), EXIT_USAGE)
    run = Run(args, model, sink)
    try:
        run.read_batch_requests(args.dataset)
        for path in args.dataset:
            run.file(path)
        run.unanswered_requests()
        summary = run.summary
        if summary.documents == 0:
            sink.abandon()
            print(summary.text(), file=sys.stderr)
            return fail("no document to write: every conversation was dropped or refused",
                        EXIT_NOTHING)
        sink.commit(summary)
    except (InputError, TemplateMissing, OutputError) as e:
        sink.abandon()
        return fail(str(e), EXIT_USAGE)
    except StrictStop as e:
        sink.abandon()
        return fail("%s (--strict)" % e, EXIT_NOTHING)
    except BaseException:
        sink.abandon()
        raise
    print(summary.text())
    print("shards in %s: train with  hsring run --model %s --data %s"
          % (args.out, args.model, args.out) if not args.prompts_only else
          "prompts in %s" % args.out)
    if args.summary_json:
        with open(args.summary_json, "w", encoding="utf-8") as f:
            json.dump(summary.as_dict(), f, indent=1, ensure_ascii=False)
            f.write("\n")
    return 0


def _quiet_transformers() -> None:
    """transformers warns about lengths past model_max_length on every long document;
    prepare counts lengths itself."""
    try:
        from transformers.utils import logging
        logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
