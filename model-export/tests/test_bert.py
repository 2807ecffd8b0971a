"""The BERT graph against the numpy float64 reference it is validated with."""

import numpy as np
import onnx
import pytest
from tiny import bert_config, bert_weights

from freshet_model_export.bert import (
    OPSET,
    build_onnx,
    mean_pool_normalize,
    ort_session,
    pad_batch,
    reference_forward,
    run_ort,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = bert_config()
    w = bert_weights(cfg, seed=1)
    path = tmp_path_factory.mktemp("bert") / "model.onnx"
    onnx.save_model(build_onnx(w, cfg, doc_string="a tiny test encoder", producer_version=7), str(path))
    return cfg, w, path


def test_graph_has_the_documented_interface(tiny):
    cfg, _, path = tiny
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in model.graph.input)
    (out,) = model.graph.output
    assert out.name == "last_hidden_state"
    assert out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == [
        "batch", "sequence", cfg["hidden_size"]]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)]
    assert model.ir_version == 8
    assert (model.producer_name, model.producer_version, model.doc_string) == (
        "freshet-export-model", "7", "a tiny test encoder")


def test_onnxruntime_agrees_with_the_float64_reference_on_a_padded_batch(tiny):
    # onnxruntime with every graph optimisation (its attention and LayerNorm fusions rewrite the
    # graph) against the plain numpy forward pass, on sequences of different lengths
    cfg, w, path = tiny
    seqs = [[2, 5, 6, 7, 8, 3], [2, 14, 15, 16, 7, 17, 13, 22, 3], [2, 3], [2] + [9] * 250 + [3]]
    ids, mask, types = pad_batch(seqs)
    got = run_ort(ort_session(path), ids, mask, types)
    want = reference_forward(w, cfg, ids, mask, types)
    assert got.shape == want.shape == (4, 252, cfg["hidden_size"])
    assert got.dtype == np.float32
    assert np.abs(got - want)[mask.astype(bool)].max() < 1e-4


def test_token_type_ids_take_effect(tiny):
    cfg, w, path = tiny
    ids, mask, types = pad_batch([[2, 5, 6, 3]])
    types[0, 2:] = 1
    got = run_ort(ort_session(path), ids, mask, types)
    assert np.abs(got - reference_forward(w, cfg, ids, mask, types)).max() < 1e-4
    assert np.abs(got - run_ort(ort_session(path), ids, mask, np.zeros_like(types))).max() > 1e-3


def test_padding_changes_no_token_of_a_sequence(tiny):
    _, _, path = tiny
    sess = ort_session(path)
    seqs = [[2, 5, 6, 3], [2, 14, 15, 16, 7, 17, 13, 3]]
    batch = run_ort(sess, *pad_batch(seqs))
    for i, s in enumerate(seqs):
        alone = run_ort(sess, *pad_batch([s]))[0]
        assert np.abs(alone - batch[i, : len(s)]).max() < 1e-5


def test_pad_batch_pads_with_zeros_and_masks_the_padding():
    ids, mask, types = pad_batch([[2, 7, 3], [2, 3]])
    assert ids.tolist() == [[2, 7, 3], [2, 3, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert types.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert ids.dtype == mask.dtype == types.dtype == np.int64


def test_mean_pooling_ignores_padding_and_normalises():
    hidden = np.array([[[3.0, 0.0], [1.0, 0.0], [100.0, 100.0]]])
    v = mean_pool_normalize(hidden, np.array([[1, 1, 0]]))
    np.testing.assert_allclose(v, [[1.0, 0.0]])
    hidden = np.array([[[1.0, 2.0], [3.0, 2.0]]])
    v = mean_pool_normalize(hidden, np.array([[1, 1]]))
    np.testing.assert_allclose(v, [[2 / np.sqrt(8), 2 / np.sqrt(8)]])
