//! Overlapping character bigrams over runs of one script, the approach of Lucene's
//! `CJKBigramFilter` and Elasticsearch's `cjk` analyzer: `학교에서` is indexed as `학교`, `교에`,
//! `에서`, so the query `학교` matches it without a dictionary that knows where words end. A run
//! of one character is indexed as that character. Characters outside the script end a run and
//! are not indexed here (the English analyzer over `body` covers Latin words and digits).

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// The bigrams of the runs of characters for which `member` holds.
#[derive(Clone, Copy)]
pub(crate) struct BigramTokenizer {
    member: fn(char) -> bool,
}

impl BigramTokenizer {
    pub(crate) fn new(member: fn(char) -> bool) -> BigramTokenizer {
        BigramTokenizer { member }
    }
}

impl Tokenizer for BigramTokenizer {
    type TokenStream<'a> = VecTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream {
        VecTokenStream::new(bigrams(text, self.member))
    }
}

/// The bigram tokens of `text` (see the module doc).
pub(crate) fn bigrams(text: &str, member: fn(char) -> bool) -> Vec<Token> {
    let mut out = Vec::new();
    // (byte offset, char) of the current run.
    let mut run: Vec<(usize, char)> = Vec::new();
    for (i, c) in text.char_indices() {
        if member(c) {
            run.push((i, c));
        } else {
            flush(text, &mut run, &mut out);
        }
    }
    flush(text, &mut run, &mut out);
    out
}

fn flush(text: &str, run: &mut Vec<(usize, char)>, out: &mut Vec<Token>) {
    let end_of = |&(i, c): &(usize, char)| i + c.len_utf8();
    match run.as_slice() {
        [] => {}
        [one] => push(text, one.0, end_of(one), out),
        many => {
            for pair in many.windows(2) {
                push(text, pair[0].0, end_of(&pair[1]), out);
            }
        }
    }
    run.clear();
}

fn push(text: &str, from: usize, to: usize, out: &mut Vec<Token>) {
    out.push(Token {
        offset_from: from,
        offset_to: to,
        position: out.len(),
        text: text[from..to].to_owned(),
        position_length: 1,
    });
}

/// A token stream over tokens computed up front.
pub(crate) struct VecTokenStream {
    tokens: std::vec::IntoIter<Token>,
    current: Token,
}

impl VecTokenStream {
    pub(crate) fn new(tokens: Vec<Token>) -> VecTokenStream {
        VecTokenStream {
            tokens: tokens.into_iter(),
            current: Token::default(),
        }
    }
}

impl TokenStream for VecTokenStream {
    fn advance(&mut self) -> bool {
        match self.tokens.next() {
            Some(t) => {
                self.current = t;
                true
            }
            None => false,
        }
    }

    fn token(&self) -> &Token {
        &self.current
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.current
    }
}

#[cfg(test)]
mod tests {
    use freshet_core::script::is_hangul;

    use super::*;

    fn texts(text: &str) -> Vec<String> {
        bigrams(text, is_hangul)
            .into_iter()
            .map(|t| t.text)
            .collect()
    }

    #[test]
    fn overlapping_bigrams_per_run() {
        assert_eq!(texts("학교에서"), ["학교", "교에", "에서"]);
        // Runs end at other characters; a one-character run is a unigram.
        assert_eq!(texts("나 학교에 간다."), ["나", "학교", "교에", "간다"]);
        assert_eq!(texts("BERT 모델, 2024년"), ["모델", "년"]);
        assert!(texts("").is_empty() && texts("plain text 。").is_empty());
        let t = bigrams("a 학교", is_hangul);
        assert_eq!((t[0].offset_from, t[0].offset_to, t[0].position), (2, 8, 0));
    }
}
