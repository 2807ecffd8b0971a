"""The hand-written safetensors reader."""

import json
import struct

import numpy as np
import pytest
from tiny import write_safetensors

from freshet_model_export.common import UsageError
from freshet_model_export.safetensors import read_safetensors


def test_reads_every_tensor_with_its_dtype_and_shape(tmp_path):
    tensors = {
        "a.weight": np.arange(12, dtype="<f4").reshape(3, 4) / 7,
        "b.half": np.array([1.5, -2.25], dtype="<f2"),
        "c.ids": np.array([[1, -2], [3, 1 << 40]], dtype="<i8"),
        "d.bytes": np.array([0, 255], dtype="u1"),
        "e.scalar_row": np.array([np.pi], dtype="<f8"),
    }
    write_safetensors(tmp_path / "m.safetensors", tensors, metadata={"format": "pt"})
    got = read_safetensors(tmp_path / "m.safetensors")
    assert sorted(got) == sorted(tensors)  # __metadata__ is not a tensor
    for name, want in tensors.items():
        assert got[name].dtype == want.dtype, name
        np.testing.assert_array_equal(got[name], want)
    got["a.weight"][0, 0] = 99  # a copy, writable, not a view of the file's bytes
    assert read_safetensors(tmp_path / "m.safetensors")["a.weight"][0, 0] == 0


def test_a_file_shorter_than_its_length_field_is_refused(tmp_path):
    (tmp_path / "short").write_bytes(b"\x01\x02")
    with pytest.raises(UsageError, match="too short"):
        read_safetensors(tmp_path / "short")


def test_a_header_longer_than_the_file_is_refused(tmp_path):
    (tmp_path / "long").write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(UsageError, match="exceeds file size"):
        read_safetensors(tmp_path / "long")


def test_an_unsupported_dtype_is_refused(tmp_path):
    head = json.dumps({"x": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    (tmp_path / "bf16").write_bytes(struct.pack("<Q", len(head)) + head + b"\0\0")
    with pytest.raises(UsageError, match="unsupported dtype BF16"):
        read_safetensors(tmp_path / "bf16")
