"""A small BERT WordPiece tokenizer (lowercasing, accent stripping, punctuation and CJK splitting,
greedy longest-match subwords), enough to tokenise the MiniLM exporter's check sentences. The
Rust live tests check that the real ``tokenizers`` implementation agrees on them."""

from __future__ import annotations

import unicodedata

from .common import UsageError


class MiniBertTokenizer:
    def __init__(self, tokenizer_json: dict):
        model = tokenizer_json["model"]
        if model.get("type") != "WordPiece":
            raise UsageError("tokenizer.json: expected a WordPiece model")
        self.vocab = model["vocab"]
        self.unk = model.get("unk_token", "[UNK]")
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_chars = model.get("max_input_chars_per_word", 100)
        norm = tokenizer_json.get("normalizer") or {}
        self.lowercase = norm.get("lowercase", True)
        sa = norm.get("strip_accents")
        self.strip_accents = self.lowercase if sa is None else sa

    @staticmethod
    def _is_punct(ch):
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _is_cjk(cp):
        return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
                or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
                or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)

    def _normalize(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
                continue
            if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
                out.append(" ")
            elif self._is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        s = "".join(out)
        if self.strip_accents:
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            s = s.lower()
        return s

    def tokenize(self, text):
        words = []
        for w in self._normalize(text).split():
            cur = ""
            for ch in w:
                if self._is_punct(ch):
                    if cur:
                        words.append(cur)
                        cur = ""
                    words.append(ch)
                else:
                    cur += ch
            if cur:
                words.append(cur)
        ids = []
        for w in words:
            if len(w) > self.max_chars:
                ids.append(self.vocab[self.unk])
                continue
            pieces, start, bad = [], 0, False
            while start < len(w):
                end, found = len(w), None
                while start < end:
                    sub = w[start:end] if start == 0 else self.prefix + w[start:end]
                    if sub in self.vocab:
                        found = self.vocab[sub]
                        break
                    end -= 1
                if found is None:
                    bad = True
                    break
                pieces.append(found)
                start = end
            ids.extend([self.vocab[self.unk]] if bad else pieces)
        return ids

    def encode(self, text, max_length):
        """[CLS] ids [SEP], truncated to `max_length` tokens in all."""
        ids = self.tokenize(text)[: max_length - 2]
        return [self.vocab["[CLS]"]] + ids + [self.vocab["[SEP]"]]
