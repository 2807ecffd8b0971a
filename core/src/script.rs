//! Which writing system a character belongs to, for the scripts that name their language or
//! need their own text analysis: Han ideographs, Japanese kana, Korean Hangul. Shared by the
//! tantivy connector (which text gets the Chinese analyzer) and the embedding connector (a
//! text's language).

/// A CJK ideograph: the Unified Ideographs, Extension A, the Compatibility Ideographs and the
/// supplementary planes' Extensions B–H and Compatibility Supplement.
pub fn is_han(c: char) -> bool {
    matches!(
        u32::from(c),
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x323AF
    )
}

/// Hiragana, Katakana (with its phonetic extensions) and half-width Katakana.
pub fn is_kana(c: char) -> bool {
    matches!(
        u32::from(c),
        0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9D
    )
}

/// Hangul syllables, jamo and compatibility jamo.
pub fn is_hangul(c: char) -> bool {
    matches!(
        u32::from(c),
        0x1100..=0x11FF | 0x3130..=0x318F | 0xAC00..=0xD7AF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_of_characters() {
        assert!(is_han('宮') && is_han('宫') && is_han('\u{20000}'));
        assert!(is_kana('の') && is_kana('タ') && is_kana('ｱ'));
        assert!(is_hangul('한') && is_hangul('ㄱ'));
        for c in ['a', '。', ' ', 'é', '한'] {
            assert!(!is_han(c) && !is_kana(c), "{c}");
        }
        assert!(!is_hangul('字'));
    }
}
