"""Token shards (docs/data-format.md, "The shard format"), written and read from Python: for
corpora tokenized by the user's own tokenizer, with an optional loss mask."""

import os
import tempfile
import struct
import zlib

import numpy as np

MAGIC = b"HSRTOKNS"
HEADER_SIZE = 64
MAX_COUNT = 1 << 48


def _width(vocab_size):
    """The narrowest of uint8, uint16, uint32 that holds the vocabulary."""
    if vocab_size <= 1 << 8:
        return 1
    if vocab_size <= 1 << 16:
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


def write_shard(path, documents, loss_masks=None, vocab_size=None):
    """Writes one shard file (name it `*.hstok` inside a corpus folder).

    documents: a sequence of documents, each a sequence of token ids (lists or numpy
    arrays); empty documents are allowed. vocab_size (required): the model's vocabulary,
    config.json's `vocab_size`; every token must be below it. (It has no default: a shard
    of unknown vocabulary, 0 in the header, is refused by `hsring run`.) loss_masks: None (every token
    counts) or, per document, a sequence of 0/1 flags, one per token (1: a training
    target, 0: context only). A shard whose every flag is 1 is written as version 1, as
    hsring does, else version 2 with the mask. The tokens are stored in the narrowest
    width that holds the vocabulary. Written to PATH.tmp, synced, then renamed. Returns
    a dict of what was written (version, width, tokens, documents, counted)."""
    if vocab_size is None:
        raise ValueError("vocab_size is required: the model's vocabulary (config.json's "
                         "vocab_size); `hsring run` refuses a shard of unknown vocabulary")
    if vocab_size < 1 or vocab_size > 1 << 31:
        raise ValueError("vocab_size %d: must be in [1, 2^31] (batches carry int32 tokens)"
                         % vocab_size)
    docs = [_token_array(d, i) for i, d in enumerate(documents)]
    lengths = [len(d) for d in docs]
    tokens = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    if len(docs) >= MAX_COUNT or tokens.size >= MAX_COUNT:
        raise ValueError("a shard holds fewer than 2^48 tokens and documents")
    if tokens.size:
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            where = int(np.argmax(tokens == bad))
            raise ValueError("token %d (at %d) is outside [0, %d)" % (bad, where, vocab_size))
    width = _width(vocab_size)
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


class Shard:
    """One shard read back: ``tokens`` (int64), ``offsets`` (D + 1 document offsets),
    ``mask`` (one bool per token; None when every token counts), ``vocab_size``."""

    def __init__(self, path, tokens, offsets, mask, vocab_size):
        self.path, self.tokens, self.offsets = path, tokens, offsets
        self.mask, self.vocab_size = mask, vocab_size

    @property
    def documents(self):
        return len(self.offsets) - 1

    def document(self, d):
        """(tokens, flags) of document d; flags are all True without a mask."""
        begin, end = int(self.offsets[d]), int(self.offsets[d + 1])
        tokens = self.tokens[begin:end]
        flags = self.mask[begin:end] if self.mask is not None else np.ones(end - begin, bool)
        return tokens, flags


def read_shard(path):
    """Reads and checks one shard as `hsring data inspect` does (header, sizes, offsets,
    the three CRCs, token values, mask padding). Raises ValueError naming the file and
    what is wrong."""
    raw = open(path, "rb").read()

    def bad(what):
        return ValueError("%s: %s" % (path, what))

    if len(raw) < HEADER_SIZE or raw[:8] != MAGIC:
        raise bad("not a token shard")
    (version, header_size, width, vocab, count, docs, token_crc, offset_crc, flags,
     mask_crc) = struct.unpack_from("<IIIIQQIIII", raw, 8)
    if version not in (1, 2):
        raise bad("format version %d is not 1 or 2" % version)
    if struct.unpack_from("<I", raw, 60)[0] != zlib.crc32(raw[:60]):
        raise bad("header checksum mismatch")
    if header_size != HEADER_SIZE or width not in (1, 2, 4) or flags & ~1:
        raise bad("bad header")
    token_end = HEADER_SIZE + count * width
    offset_end = token_end + (docs + 1) * 8
    mask_end = offset_end + ((count + 7) // 8 if flags & 1 else 0)
    if len(raw) != mask_end:
        raise bad("%d bytes, expected %d (truncated or trailing bytes)" % (len(raw), mask_end))
    token_bytes, offset_bytes = raw[HEADER_SIZE:token_end], raw[token_end:offset_end]
    mask_bytes = raw[offset_end:mask_end]
    if zlib.crc32(token_bytes) != token_crc or zlib.crc32(offset_bytes) != offset_crc:
        raise bad("checksum mismatch (tokens or offsets)")
    if flags & 1 and zlib.crc32(mask_bytes) != mask_crc:
        raise bad("loss mask checksum mismatch")
    tokens = np.frombuffer(token_bytes, {1: "<u1", 2: "<u2", 4: "<u4"}[width]).astype(np.int64)
    offsets = np.frombuffer(offset_bytes, "<u8").astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != count or (np.diff(offsets) < 0).any():
        raise bad("bad document offsets")
    if vocab and tokens.size and int(tokens.max()) >= vocab:
        raise bad("a token is outside the vocabulary of %d" % vocab)
    mask = None
    if flags & 1:
        bits = np.unpackbits(np.frombuffer(mask_bytes, np.uint8), bitorder="little")
        if bits[count:].any():
            raise bad("bad loss mask (padding bits set)")
        mask = bits[:count].astype(bool)
    return Shard(str(path), tokens, offsets, mask, vocab)
