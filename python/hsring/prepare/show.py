"""`hsring data inspect PATH --doc N [--model DIR] [--tokens]` (python3 -m hsring.prepare.show):
one document of a corpus, decoded with the model's tokenizer, its trained text between
the marks (without --model: the token ids). Documents count across the corpus's shards in
file-name order, as hsring reads them. Exit 0, or 2 with the error."""

import argparse
import os
import signal
import sys
from typing import List, Optional

from ..shards import read_shard

PROG = "hsring data inspect"
OPEN_MARK, CLOSE_MARK = "\u27e6", "\u27e7"  # the trained text is between them


def shard_paths(path: str) -> List[str]:
    if os.path.isdir(path):
        return [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".hstok")]
    return [path]


def find_document(path: str, doc: int):
    """(shard, index in it, total documents) of the corpus's document `doc`."""
    total, found = 0, None
    for shard_path in shard_paths(path):
        shard = read_shard(shard_path)
        if found is None and doc < total + shard.documents:
            found = (shard, doc - total)
        total += shard.documents
    if found is None:
        raise ValueError("%s: --doc %d, but the corpus has %d documents" % (path, doc, total))
    return found[0], found[1], total


def runs(flags) -> List[tuple]:
    """[(begin, end, trained)] of the runs of equal flags."""
    out, begin = [], 0
    for t in range(1, len(flags) + 1):
        if t == len(flags) or flags[t] != flags[begin]:
            out.append((begin, t, bool(flags[begin])))
            begin = t
    return out


def render(tokens, flags, tokenizer) -> str:
    def text(ids):
        if tokenizer is None:
            return " ".join(str(int(i)) for i in ids)
        return tokenizer.decode([int(i) for i in ids], skip_special_tokens=False,
                                clean_up_tokenization_spaces=False)
    parts = []
    for begin, end, trained in runs(flags):
        piece = text(tokens[begin:end])
        parts.append(OPEN_MARK + piece + CLOSE_MARK if trained else piece)
    return (" " if tokenizer is None else "").join(parts)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="shard folder, or one shard file")
    p.add_argument("--doc", type=int, required=True, help="document number (from 0)")
    p.add_argument("--model", help="model folder whose tokenizer decodes the tokens")
    p.add_argument("--tokens", action="store_true", help="one line per token")
    args = p.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    try:
        if args.doc < 0:
            raise ValueError("--doc %d is negative" % args.doc)
        shard, index, total = find_document(args.path, args.doc)
        tokenizer = None
        if args.model:
            from transformers import AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained(args.model)
    except (OSError, ValueError) as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 2
    tokens, flags = shard.document(index)
    print("document %d of %d (%s, its document %d): %d tokens, %d trained%s"
          % (args.doc, total, os.path.basename(shard.path), index, len(tokens), int(flags.sum()),
             "" if shard.mask is not None else " (the shard has no mask: all count)"))
    if args.tokens:
        for t, (token, flag) in enumerate(zip(tokens, flags)):
            piece = repr(tokenizer.decode([int(token)])) if tokenizer is not None else ""
            print("%6d %8d %s %s" % (t, token, "T" if flag else ".", piece))
    else:
        print("trained text between %s and %s:" % (OPEN_MARK, CLOSE_MARK))
        print(render(tokens, flags, tokenizer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
