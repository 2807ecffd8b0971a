"""A safetensors file read by hand (8-byte little-endian header length, JSON header, raw
little-endian tensors), so that the export needs neither torch nor the safetensors package."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from .common import UsageError


def read_safetensors(path: Path) -> dict:
    """Parses a safetensors file into {name: numpy array} (copies, little-endian)."""
    import numpy as np

    dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1", "I8": "i1"}
    data = path.read_bytes()
    if len(data) < 8:
        raise UsageError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise UsageError(f"{path}: header length {n} exceeds file size")
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = dtypes.get(meta["dtype"])
        if dt is None:
            raise UsageError(f"{path}: tensor {name} has unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        arr = np.frombuffer(data, dtype=dt, count=(end - start) // np.dtype(dt).itemsize, offset=base + start)
        out[name] = arr.reshape(meta["shape"]).copy()
    return out

