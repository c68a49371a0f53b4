"""The output of `prepare`: documents gathered into shards (`shard-00000.hstok`, ...), written
into a private folder beside the destination and renamed into place at the end, so that an
interrupted run never leaves a corpus that looks whole; and the summary of what went in."""

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..shards import _umask, write_shard

SUMMARY_NAME = "prepare.json"  # beside the shards (hsring reads only *.hstok)


class OutputError(Exception):
    """The output folder cannot be used; the message names it."""


def check_output_folder(out: str) -> None:
    """-o names a new or empty folder (as `hsring data pack` requires)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputError("-o %s: a file, not a folder" % out)
    if os.path.isdir(out) and os.listdir(out):
        raise OutputError("-o %s: the folder is not empty" % out)


class ShardSink:
    """Collects documents and writes a shard each time the next document would take the
    current one past shard_tokens (a document never spans shards)."""

    def __init__(self, out: str, vocab_size: int, shard_tokens: int):
        check_output_folder(out)
        self.out = os.path.abspath(out)
        parent = os.path.dirname(self.out)
        os.makedirs(parent, exist_ok=True)
        self.staging = tempfile.mkdtemp(prefix="." + os.path.basename(self.out) + ".tmp-",
                                        dir=parent)
        self.vocab_size = vocab_size
        self.shard_tokens = shard_tokens
        self.documents: List[np.ndarray] = []
        self.flags: List[np.ndarray] = []
        self.pending_tokens = 0
        self.shards: List[str] = []

    def add(self, tokens: List[int], flags: Optional[List[int]]) -> None:
        if self.documents and self.pending_tokens + len(tokens) > self.shard_tokens:
            self._write()
        self.documents.append(np.asarray(tokens, dtype=np.int64))
        self.flags.append(np.ones(len(tokens), np.uint8) if flags is None
                          else np.asarray(flags, dtype=np.uint8))
        self.pending_tokens += len(tokens)

    def _write(self) -> None:
        name = "shard-%05d.hstok" % len(self.shards)
        write_shard(os.path.join(self.staging, name), self.documents, loss_masks=self.flags,
                    vocab_size=self.vocab_size)
        self.shards.append(name)
        self.documents, self.flags, self.pending_tokens = [], [], 0

    def commit(self, summary: "Summary") -> None:
        """Writes the last shard and the summary (naming the shards), then moves the folder
        into place."""
        if self.documents:
            self._write()
        summary.shards = list(self.shards)
        with open(os.path.join(self.staging, SUMMARY_NAME), "w", encoding="utf-8") as f:
            json.dump(summary.as_dict(), f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.chmod(self.staging, 0o777 & ~_umask())
        check_output_folder(self.out)  # still new or empty: nobody wrote there meanwhile
        if os.path.isdir(self.out):
            os.rmdir(self.out)
        os.rename(self.staging, self.out)

    def abandon(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


@dataclass
class Summary:
    """What went in and what came out; `as_dict` is the JSON of --summary-json."""
    model: str
    vocab_size: int
    mode: str  # "train" or "prompts-only"
    files: List[str] = field(default_factory=list)
    conversations: int = 0  # records read, refused ones included (batch requests apart)
    batch_requests: int = 0  # records of batch input files, joined to their answers
    documents: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    truncated: int = 0
    routes: Dict[str, int] = field(default_factory=dict)
    dropped: List[Dict] = field(default_factory=list)  # over --max-length, empty...
    refused: List[Dict] = field(default_factory=list)  # cannot be read or masked exactly
    shards: List[str] = field(default_factory=list)

    def count(self, tokens: int, trained: int, route: str) -> None:
        self.documents += 1
        self.tokens += tokens
        self.trained_tokens += trained
        self.routes[route] = self.routes.get(route, 0) + 1

    def as_dict(self) -> Dict:
        share = self.trained_tokens / self.tokens if self.tokens else 0.0
        return {"model": self.model, "vocab_size": self.vocab_size, "mode": self.mode,
                "files": self.files, "conversations": self.conversations,
                "batch_requests": self.batch_requests,
                "documents": self.documents, "tokens": self.tokens,
                "trained_tokens": self.trained_tokens, "trained_share": round(share, 6),
                "truncated": self.truncated, "mask_routes": self.routes,
                "dropped": self.dropped, "refused": self.refused, "shards": self.shards}

    def text(self, shown: int = 10) -> str:
        share = 100.0 * self.trained_tokens / self.tokens if self.tokens else 0.0
        lines = ["%d conversations in %d files: %d documents, %d dropped, %d refused; "
                 "%d truncated to --max-length"
                 % (self.conversations, len(self.files), self.documents, len(self.dropped),
                    len(self.refused), self.truncated)
                 + ("; %d batch requests" % self.batch_requests if self.batch_requests else ""),
                 "%d tokens, %d trained (%.1f%%), vocabulary %d, %d shards"
                 % (self.tokens, self.trained_tokens, share, self.vocab_size, len(self.shards))]
        for kind, items in (("refused", self.refused), ("dropped", self.dropped)):
            for item in items[:shown]:
                lines.append("  %s %s: %s" % (kind, item["where"], item["reason"]))
            if len(items) > shown:
                lines.append("  ... and %d more %s (all in --summary-json)"
                             % (len(items) - shown, kind))
        return "\n".join(lines)
