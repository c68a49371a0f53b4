"""Reading the records of a dataset file: JSON Lines, a JSON array, or Parquet.

A file that cannot be read as a whole (missing, not JSON, Parquet without pyarrow) is an
InputError and stops the run. A single bad line of a JSON Lines file (not UTF-8, not JSON,
not an object) is one record with an error: it is refused and counted, the others go on.
"""

import json
import os
from dataclasses import dataclass
from typing import Any, Iterator, Optional


class InputError(Exception):
    """A dataset file that cannot be read at all; the message names the file."""


@dataclass
class Record:
    path: str
    index: int  # 0-based, among the file's records (blank lines are not records)
    line: Optional[int]  # 1-based line of a JSON Lines file, else None
    value: Any = None  # the parsed record (a dict when well formed)
    error: Optional[str] = None  # why the record itself could not be read

    def where(self) -> str:
        """`file:line` for JSON Lines, `file[record]` otherwise: what messages name."""
        if self.line is not None:
            return "%s:%d" % (self.path, self.line)
        return "%s[%d]" % (self.path, self.index)


PARQUET_MAGIC = b"PAR1"
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines")


def read_records(path: str) -> Iterator[Record]:
    """The records of one dataset file, in file order."""
    if not os.path.isfile(path):
        raise InputError("%s: no such file" % path)
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise InputError("%s: cannot be read: %s" % (path, e.strerror)) from e
    if head.startswith(PARQUET_MAGIC):
        return _parquet_records(path)
    first = head.lstrip()[:1]
    if path.lower().endswith(JSONL_SUFFIXES):  # whatever its first line holds
        return _jsonl_records(path)
    if first == b"[" or (first == b"{" and _is_one_json(path)):
        return _json_records(path)
    if first in (b"{", b""):
        return _jsonl_records(path)
    raise InputError("%s: neither JSON Lines, a JSON array nor Parquet (it starts with %r)"
                     % (path, head[:16]))


def _is_one_json(path: str) -> bool:
    """Whether a file starting with `{` is one JSON object (one record) rather than JSON
    Lines (under a .json name, as many datasets are)."""
    try:
        with open(path, "rb") as f:
            json.loads(f.read())
        return True
    except (ValueError, OSError):
        return False


def _json_records(path: str) -> Iterator[Record]:
    try:
        with open(path, "rb") as f:
            value = json.loads(f.read().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError("%s: not UTF-8 (byte %d)" % (path, e.start)) from e
    except ValueError as e:
        raise InputError("%s: not JSON: %s" % (path, e)) from e
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise InputError("%s: a JSON %s, not an array of records" % (path, type(value).__name__))
    for index, item in enumerate(value):
        yield _checked(Record(path, index, None, item))


def _jsonl_records(path: str) -> Iterator[Record]:
    index = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            record = Record(path, index, number)
            index += 1
            try:
                record.value = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                record.error = "not UTF-8 (byte %d of the line)" % e.start
            except ValueError as e:  # json.JSONDecodeError, and numbers too deep to parse
                record.error = "not JSON: %s" % e
            except RecursionError:
                record.error = "not JSON: nested too deeply"
            yield _checked(record)


def _parquet_records(path: str) -> Iterator[Record]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise InputError("%s: reading Parquet needs pyarrow: pip install pyarrow" % path) from e
    try:
        table = pq.ParquetFile(path)
        index = 0
        for batch in table.iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                yield Record(path, index, None, row)
                index += 1
    except (OSError, ValueError) as e:  # pyarrow's errors derive from these
        raise InputError("%s: not a readable Parquet file: %s" % (path, e)) from e


def _checked(record: Record) -> Record:
    if record.error is None and not isinstance(record.value, dict):
        record.error = "a JSON %s, not an object" % type(record.value).__name__
    return record
