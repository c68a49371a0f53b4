"""hsring.write_shard against docs/data-format.md, read back by `hsring data inspect`
(which checks every header field, size, CRC, offset, token value and mask padding) and
compared byte for byte with `hsring data pack`'s own shard."""

import struct
import subprocess

import numpy as np
import pytest

import hsring
from conftest import hsring_bin


def inspect(folder):
    done = subprocess.run([hsring_bin(), "data", "inspect", str(folder)], capture_output=True,
                          text=True)
    return done.returncode, done.stdout + done.stderr


def shard_line(text, name):
    return next(line.split() for line in text.splitlines() if line.startswith(name))


def test_version_1_is_what_hsring_data_pack_writes(tmp_path):
    texts = [b"The first document.\n", b"A second one,\nover two lines.\n", b"x"]
    (tmp_path / "txt").mkdir()
    for i, t in enumerate(texts):
        (tmp_path / "txt" / ("%d.txt" % i)).write_bytes(t)
    subprocess.run([hsring_bin(), "data", "pack", str(tmp_path / "txt"), "-o", str(tmp_path / "packed")],
                   check=True, capture_output=True)
    (tmp_path / "py").mkdir()
    info = hsring.write_shard(tmp_path / "py" / "shard-00000.hstok", [list(t) for t in texts],
                              vocab_size=256)
    assert info == {"version": 1, "width": 1, "tokens": sum(map(len, texts)), "documents": 3,
                    "counted": sum(map(len, texts))}
    ours = (tmp_path / "py" / "shard-00000.hstok").read_bytes()
    assert ours == (tmp_path / "packed" / "shard-00000.hstok").read_bytes()
    # An all-ones mask is no mask: still version 1, the same bytes.
    hsring.write_shard(tmp_path / "py" / "ones.hstok", [list(t) for t in texts],
                       loss_masks=[[1] * len(t) for t in texts], vocab_size=256)
    assert (tmp_path / "py" / "ones.hstok").read_bytes() == ours


def test_version_2_with_a_loss_mask_reads_back(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50000, n) for n in (13, 0, 1, 30)]
    masks = [rng.integers(0, 2, len(d)) for d in docs]
    info = hsring.write_shard(tmp_path / "shard-00000.hstok", docs, loss_masks=masks,
                              vocab_size=50000)
    counted = int(sum(m.sum() for m in masks))
    assert info["version"] == 2 and info["width"] == 2 and info["counted"] == counted
    rc, text = inspect(tmp_path)
    assert rc == 0, text
    line = shard_line(text, "shard-00000.hstok")
    assert line[1:7] == ["uint16", "50000", "44", "4", str(counted), "ok"], text
    raw = (tmp_path / "shard-00000.hstok").read_bytes()
    version, _, width, vocab, t, d, _, _, flags = struct.unpack_from("<IIIIQQIII", raw, 8)
    assert (version, width, vocab, t, d, flags) == (2, 2, 50000, 44, 4, 1)
    tokens = np.frombuffer(raw, "<u2", 44, 64)
    assert (tokens == np.concatenate(docs)).all()
    offsets = np.frombuffer(raw, "<u8", 5, 64 + 88)
    assert offsets.tolist() == [0, 13, 13, 14, 44]
    mask = np.unpackbits(np.frombuffer(raw, np.uint8, offset=64 + 88 + 40), bitorder="little")
    assert len(raw) == 64 + 88 + 40 + 6
    assert (mask[:44] == np.concatenate(masks)).all() and not mask[44:].any()
    shard = hsring.read_shard(tmp_path / "shard-00000.hstok")
    assert shard.documents == 4 and shard.vocab_size == 50000
    for d in range(4):
        tokens, flags = shard.document(d)
        assert tokens.tolist() == list(docs[d]) and flags.tolist() == [bool(f) for f in masks[d]]


def test_widths_and_a_damaged_shard(tmp_path):
    hsring.write_shard(tmp_path / "a.hstok", [[0, 5, 70000]], vocab_size=151936)
    hsring.write_shard(tmp_path / "b.hstok", [[3, 2, 1]], vocab_size=200)
    rc, text = inspect(tmp_path)
    assert rc == 0, text
    assert shard_line(text, "a.hstok")[1:3] == ["uint32", "151936"]
    assert shard_line(text, "b.hstok")[1:3] == ["uint8", "200"]
    shard = hsring.read_shard(tmp_path / "a.hstok")
    assert shard.tokens.tolist() == [0, 5, 70000] and shard.mask is None
    assert shard.vocab_size == 151936 and shard.documents == 1
    raw = bytearray((tmp_path / "a.hstok").read_bytes())
    raw[64] ^= 1  # a token bit: the token CRC no longer matches
    (tmp_path / "a.hstok").write_bytes(bytes(raw))
    rc, text = inspect(tmp_path)
    assert rc == 1 and "a.hstok" in text


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="outside"):
        hsring.write_shard(tmp_path / "x.hstok", [[1, 256]], vocab_size=256)
    with pytest.raises(ValueError, match="outside"):
        hsring.write_shard(tmp_path / "x.hstok", [[-1]], vocab_size=8)
    # No vocabulary, no shard: `hsring run` would refuse one of vocabulary 0.
    with pytest.raises(ValueError, match="vocab_size is required"):
        hsring.write_shard(tmp_path / "x.hstok", [[3, 2, 1]])
    with pytest.raises(ValueError, match="must be in"):
        hsring.write_shard(tmp_path / "x.hstok", [[3, 2, 1]], vocab_size=0)
    with pytest.raises(ValueError, match="mask flags for"):
        hsring.write_shard(tmp_path / "x.hstok", [[1, 2]], loss_masks=[[1]], vocab_size=8)
    with pytest.raises(ValueError, match="loss masks for"):
        hsring.write_shard(tmp_path / "x.hstok", [[1, 2]], loss_masks=[], vocab_size=8)
    with pytest.raises(ValueError, match="0 or 1"):
        hsring.write_shard(tmp_path / "x.hstok", [[1, 2]], loss_masks=[[1, 2]], vocab_size=8)
    with pytest.raises(ValueError, match="document 1 holds float64"):
        hsring.write_shard(tmp_path / "x.hstok", [[1, 2], [3.7, 1.0]], vocab_size=8)  # not 3, 1
    assert not list(tmp_path.iterdir())


def test_a_symlink_planted_at_the_old_temporary_name_is_never_written(tmp_path):
    """The temporary was PATH.tmp: another user who planted a symlink there had root's
    write_shard truncate and overwrite the file it pointed at (issue 33)."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's secret\n")
    victim.chmod(0o600)
    (tmp_path / "shared").mkdir()
    path = tmp_path / "shared" / "shard-00000.hstok"
    (tmp_path / "shared" / "shard-00000.hstok.tmp").symlink_to(victim)
    hsring.write_shard(path, [[1, 2, 3]], vocab_size=256)
    assert victim.read_bytes() == b"root's secret\n"
    assert path.is_file() and not path.is_symlink()
    code, text = inspect(tmp_path / "shared")
    assert code == 0, text
