"""Token shards (docs/data-format.md, "The shard format"), written from Python: for corpora
tokenized by the user's own tokenizer, with an optional loss mask."""

import os
import tempfile
import struct
import zlib

import numpy as np

MAGIC = b"HSRTOKNS"
HEADER_SIZE = 64
MAX_COUNT = 1 << 48


def _width(vocab_size, max_token):
    """The narrowest of uint8, uint16, uint32 that holds the vocabulary (or, when it is
    unknown, the largest token)."""
    top = vocab_size if vocab_size else max_token + 1
    if top <= 1 << 8:
        return 1
    if top <= 1 << 16:
        return 2
    return 4


def _token_array(document, index):
    """A document's tokens as int64, refusing what is not integers (floats would be
    truncated into other tokens)."""
    a = np.asarray(document)
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(a.dtype, np.integer) or a.dtype == np.uint64 and int(a.max()) >= 1 << 63:
        raise ValueError("document %d holds %s values: tokens are integers" % (index, a.dtype))
    return a.astype(np.int64).reshape(-1)


def _umask():
    """The process's umask, read without setting it (os.umask would race other threads)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def write_shard(path, documents, loss_masks=None, vocab_size=0):
    """Writes one shard file (name it `*.hstok` inside a corpus folder).

    documents: a sequence of documents, each a sequence of token ids (lists or numpy
    arrays); empty documents are allowed. vocab_size: the model's vocabulary (every token
    must be below it; 0: unknown, tokens below 2^31). loss_masks: None (every token
    counts) or, per document, a sequence of 0/1 flags, one per token (1: a training
    target, 0: context only). A shard whose every flag is 1 is written as version 1, as
    hsring does, else version 2 with the mask. The tokens are stored in the narrowest
    width that holds the vocabulary. Written to PATH.tmp, synced, then renamed. Returns
    a dict of what was written (version, width, tokens, documents, counted)."""
    if vocab_size < 0 or vocab_size > 1 << 31:
        raise ValueError("vocab_size %d: must be in [0, 2^31] (batches carry int32 tokens)"
                         % vocab_size)
    docs = [_token_array(d, i) for i, d in enumerate(documents)]
    lengths = [len(d) for d in docs]
    tokens = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    if len(docs) >= MAX_COUNT or tokens.size >= MAX_COUNT:
        raise ValueError("a shard holds fewer than 2^48 tokens and documents")
    if tokens.size:
        low, high = int(tokens.min()), int(tokens.max())
        limit = vocab_size if vocab_size else 1 << 31
        if low < 0 or high >= limit:
            bad = low if low < 0 else high
            where = int(np.argmax(tokens == bad))
            raise ValueError("token %d (at %d) is outside [0, %d)%s"
                             % (bad, where, limit, "" if vocab_size else " (vocabulary unknown)"))
    else:
        high = 0
    width = _width(vocab_size, high)
    token_bytes = tokens.astype({1: "<u1", 2: "<u2", 4: "<u4"}[width]).tobytes()
    offsets = np.zeros(len(docs) + 1, dtype="<u8")
    np.cumsum(lengths, out=offsets[1:])
    offset_bytes = offsets.tobytes()

    mask_bytes, flags = b"", 0
    counted = int(tokens.size)
    if loss_masks is not None:
        masks = list(loss_masks)
        if len(masks) != len(docs):
            raise ValueError("%d loss masks for %d documents" % (len(masks), len(docs)))
        parts = []
        for d, (m, n) in enumerate(zip(masks, lengths)):
            m = np.asarray(m).reshape(-1)
            if len(m) != n:
                raise ValueError("document %d: %d mask flags for %d tokens" % (d, len(m), n))
            if m.size and not np.isin(m, (0, 1)).all():
                raise ValueError("document %d: mask flags are 0 or 1" % d)
            parts.append(m.astype(bool))
        bits = np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
        counted = int(bits.sum())
        if counted != bits.size:  # one token masked out: version 2 with the mask
            mask_bytes = np.packbits(bits, bitorder="little").tobytes()
            flags = 1
    version = 2 if flags else 1
    head = struct.pack("<8sIIIIQQIIII4x", MAGIC, version, HEADER_SIZE, width, vocab_size,
                       tokens.size, len(docs), zlib.crc32(token_bytes), zlib.crc32(offset_bytes),
                       flags, zlib.crc32(mask_bytes) if flags else 0)
    head += struct.pack("<I", zlib.crc32(head))
    assert len(head) == HEADER_SIZE
    # A new temporary of a random name (O_EXCL, no symlink followed), as the C++ writers
    # make theirs (common/exclusive_file.h): a name planted beside `path` is never written.
    folder, name = os.path.split(os.path.abspath(str(path)))
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".tmp-", dir=folder)
    try:
        os.fchmod(fd, 0o644 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            for part in (head, token_bytes, offset_bytes, mask_bytes):
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    return {"version": version, "width": width, "tokens": int(tokens.size),
            "documents": len(docs), "counted": counted}
