"""The word-embedding table left in the model file, read a row at a time.

The table (30522 x 384 float32, 47 MB) is half the model's weights, yet a query touches a
dozen of its rows. ``split_model`` cuts it out of the model as it is loaded: the session
gets the graph with ``word_embeddings`` as an input instead of a weight, and each run
feeds it only the rows its tokens use, read from the model file (the page cache holds
them, shared by every process, outside each one's RSS). The ``Gather`` then picks the same
floats as from the whole table, so the vectors are the same bit for bit.

The ONNX file is a protobuf ``ModelProto``; this walks its wire format directly (fields:
``ModelProto.graph`` 7; ``GraphProto.node`` 1, ``initializer`` 5, ``input`` 11;
``NodeProto.input`` 1, ``op_type`` 4; ``TensorProto.dims`` 1, ``data_type`` 2, ``name``
8, ``raw_data`` 9), so loading needs neither the ``onnx`` package nor a second copy of
the weights.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

TABLE = "word_embeddings"
IDS = "input_ids"
_FLOAT = 1  # TensorProto.DataType.FLOAT
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, start of the field, start and end of its value)."""
    pos = start
    while pos < end:
        key, at = _varint(buf, pos)
        wire = key & 7
        if wire == _VARINT:
            _, stop = _varint(buf, at)
        elif wire == _FIXED64:
            stop = at + 8
        elif wire == _BYTES:
            length, at = _varint(buf, at)
            stop = at + length
        elif wire == _FIXED32:
            stop = at + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield key >> 3, wire, pos, at, stop
        pos = stop
    if pos != end:
        raise ValueError("truncated protobuf message")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _message(field: int, body: bytes) -> bytes:
    return _encode_varint(field << 3 | _BYTES) + _encode_varint(len(body)) + body


def _table_input(rows: str, width: int) -> bytes:
    """``GraphProto.input`` of a float tensor ``(rows, width)``: a ValueInfoProto of name
    (1) and TypeProto (2) -> tensor_type (1) -> elem_type (1), shape (2) -> dim (1) ->
    dim_param (2) / dim_value (1)."""
    shape = _message(1, _message(2, rows.encode())) + _message(
        1, _encode_varint(1 << 3 | _VARINT) + _encode_varint(width)
    )
    tensor = _encode_varint(1 << 3 | _VARINT) + _encode_varint(_FLOAT) + _message(2, shape)
    return _message(11, _message(1, TABLE.encode()) + _message(2, _message(1, tensor)))


@dataclass(frozen=True)
class _Table:
    field: tuple[int, int]  # the initializer's bytes in the graph message
    offset: int  # of its raw float32 data in the file
    rows: int
    width: int


def _find_table(buf: memoryview, start: int, end: int) -> _Table | None:
    """The float ``word_embeddings`` initializer if the graph's only use of it is a
    ``Gather`` of ``input_ids`` (as ``export.build_model`` writes it)."""
    table = None
    uses = []
    for field, _, pos, at, stop in _fields(buf, start, end):
        if field == 1:  # a node: its inputs and op type
            inputs, op = [], b""
            for f, _, _, a, s in _fields(buf, at, stop):
                if f == 1:
                    inputs.append(bytes(buf[a:s]))
                elif f == 4:
                    op = bytes(buf[a:s])
            if TABLE.encode() in inputs:
                uses.append((op, inputs))
        elif field == 5:
            name, dims, dtype, raw = b"", [], 0, (0, -1)
            for f, wire, _, a, s in _fields(buf, at, stop):
                if f == 8:
                    name = bytes(buf[a:s])
                elif f == 1 and wire == _VARINT:
                    dims.append(_varint(buf, a)[0])
                elif f == 1:  # packed dims
                    p = a
                    while p < s:
                        d, p = _varint(buf, p)
                        dims.append(d)
                elif f == 2:
                    dtype = _varint(buf, a)[0]
                elif f == 9:
                    raw = (a, s)
            if name == TABLE.encode():
                size = raw[1] - raw[0]
                if dtype != _FLOAT or len(dims) != 2 or size != dims[0] * dims[1] * 4:
                    return None
                table = _Table((pos, stop), raw[0], dims[0], dims[1])
    if uses != [(b"Gather", [TABLE.encode(), IDS.encode()])]:
        return None
    return table


class WordTable:
    """The rows of the table, read from the model file as it was opened at load (a file
    replaced later changes nothing this session reads)."""

    def __init__(self, file: BinaryIO, offset: int, rows: int, width: int) -> None:
        self._file, self._offset, self.rows, self.width = file, offset, rows, width

    def feed(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The session inputs for token ``ids``: each distinct id's row, and the ids
        renumbered into them (in Python: numpy's ``unique`` costs more at a query's size)."""
        rows: dict[int, int] = {}
        local = [rows.setdefault(i, len(rows)) for i in ids.ravel().tolist()]
        if rows and not 0 <= min(rows) <= max(rows) < self.rows:
            raise ValueError("token id outside the word-embedding table")
        size, fd, offset = self.width * 4, self._file.fileno(), self._offset
        data = b"".join([os.pread(fd, size, offset + i * size) for i in rows])
        table = np.frombuffer(data, dtype="<f4").astype(np.float32, copy=False)
        return {
            IDS: np.array(local, dtype=ids.dtype).reshape(ids.shape),
            TABLE: table.reshape(-1, self.width),
        }


Piece = bytes | tuple[int, int]  # new bytes, or a (start, end) range of the model file


def split_model(path: Path) -> tuple[list[Piece], WordTable] | None:
    """The model without its word-embedding table (pieces to write out in order), and the
    table; None when the model has no such table (then load it whole)."""
    file = open(path, "rb", buffering=0)  # noqa: SIM115 (the table keeps it open)
    try:
        with (
            mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
            memoryview(mapped) as buf,
        ):
            found = _split(buf)
    except (ValueError, IndexError):
        found = None  # not a model this reads: onnxruntime loads it whole, or says why not
    if found is None:
        file.close()
        return None
    pieces, table = found
    return pieces, WordTable(file, table.offset, table.rows, table.width)


def _split(buf: memoryview) -> tuple[list[Piece], _Table] | None:
    graphs = [(pos, at, stop) for n, _, pos, at, stop in _fields(buf, 0, len(buf)) if n == 7]
    if len(graphs) != 1:
        return None
    pos, at, stop = graphs[0]
    table = _find_table(buf, at, stop)
    if table is None:
        return None
    cut, end = table.field
    extra = _table_input("words", table.width)
    size = (cut - at) + (stop - end) + len(extra)
    header = _encode_varint(7 << 3 | _BYTES) + _encode_varint(size)
    return [(0, pos), header, (at, cut), (end, stop), extra, (stop, len(buf))], table


def _write(pieces: list[Piece], src: int, dst: int) -> None:
    for piece in pieces:
        if isinstance(piece, bytes):
            view = memoryview(piece)
            while view:
                view = view[os.write(dst, view) :]
            continue
        start, end = piece
        while start < end:  # in the kernel: the weights never pass through this process
            sent = os.sendfile(dst, src, start, end - start)
            if sent <= 0:
                raise OSError(f"the model file ended at {start} of {end} bytes")
            start += sent


@contextmanager
def _source(pieces: list[Piece], words: WordTable) -> Iterator[str | bytes]:
    """The model as a path in memory (a memfd) while the block runs, else its bytes: an
    onnxruntime session keeps the bytes it was built from for as long as it lives (to
    rebuild itself), but only reads a path."""
    src = words._file.fileno()
    memfd_create = getattr(os, "memfd_create", None)  # Linux
    fd = memfd_create("wakemark-model", os.MFD_CLOEXEC) if memfd_create else -1
    try:
        path = f"/proc/self/fd/{fd}"
        if fd >= 0 and os.path.exists(path):
            _write(pieces, src, fd)
            yield path
        else:
            yield b"".join(
                p if isinstance(p, bytes) else os.pread(src, p[1] - p[0], p[0]) for p in pieces
            )
    finally:
        if fd >= 0:
            os.close(fd)


def load_session(path: Path, options: Any) -> tuple[Any, WordTable | None]:
    """An onnxruntime session of the model at ``path``, and its word table if it was cut
    out (then each run needs ``WordTable.feed``)."""
    import onnxruntime as ort

    split = split_model(path)
    if split is None:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]), None
    pieces, words = split
    with _source(pieces, words) as source:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"]), words
