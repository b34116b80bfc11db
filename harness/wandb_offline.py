"""Read an offline W&B run's ``.wandb`` file: what the mirror already holds when a killed run resumes.

The file is LevelDB's log format behind W&B's header; wandb 0.31 reads it only in its Go service, so the framing is
decoded here, each record a ``wandb.proto.wandb_internal_pb2.Record``. A record still being written, or cut off by a
kill (short, or its CRC not right), ends the read: what precedes it is what W&B holds.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
BLOCK = 32768


def records(path: Path) -> Iterator[Any]:
    """The protobuf records of ``path`` that are whole."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, position, payload = path.read_bytes(), len(HEADER), b""
    if len(data) < len(HEADER):  # just created
        return
    if data[:len(HEADER)] != HEADER:
        raise ValueError(f"{path} is not a W&B transaction log")
    while position + 7 <= len(data):
        if BLOCK - position % BLOCK < 7:  # a block's tail too short for a header is padding
            position += BLOCK - position % BLOCK
            continue
        checksum, length, kind = struct.unpack("<IHB", data[position:position + 7])
        chunk = data[position + 7:position + 7 + length]
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            return
        position += 7 + length
        payload = chunk if kind in (1, 2) else payload + chunk  # full, first | middle, last
        if kind in (1, 4):
            record = Record()
            record.ParseFromString(payload)
            yield record


def item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


def history(path: Path) -> list[dict[str, Any]]:
    """Every history row of ``path``, in order."""
    return [{item_key(item): json.loads(item.value_json) for item in record.history.item}
            for record in records(path) if record.WhichOneof("record_type") == "history"]


def run_files(run_dir: Path, run_id: str) -> list[Path]:
    """The offline files of W&B run ``run_id`` under ``run_dir`` (one per launch that logged to it)."""
    return sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
