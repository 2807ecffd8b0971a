//! Which writing system a character belongs to, for the scripts that name their language or
//! need their own text analysis: Han ideographs, Japanese kana, Korean Hangul. Shared by the
//! tantivy connector (which text gets the Chinese, Japanese and Korean analyzers:
//! [`CjkScripts`]) and the embedding connector (a text's language).

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

/// A Han ideograph or one of the ideographic marks outside the Han blocks (々 iteration mark,
/// 〇 ideographic zero), which Chinese and Japanese text share.
pub fn is_ideographic(c: char) -> bool {
    matches!(c, '\u{3005}' | '\u{3007}') || is_han(c)
}

/// A kana letter: hiragana and katakana syllables (small ones included) and half-width
/// katakana, not the marks of the kana blocks (the middle dot ・, which Chinese text uses as a
/// separator, the prolonged sound mark ー, the iteration and voicing marks).
pub fn is_kana_letter(c: char) -> bool {
    matches!(
        u32::from(c),
        0x3041..=0x3096 | 0x30A1..=0x30FA | 0x31F0..=0x31FF | 0xFF66..=0xFF6F | 0xFF71..=0xFF9D
    )
}

/// Whether `kana` kana letters ([`is_kana_letter`]) beside `han` Han letters make a text
/// Japanese: at least one in twenty of them (see [`CjkScripts`]). The one rule of the tantivy
/// analyzers and the embedding connector's language detection.
pub fn kana_makes_japanese(han: usize, kana: usize) -> bool {
    kana > 0 && kana * 20 >= han + kana
}

/// Which of the CJK scripts a text contains, and the analysis that follows from them: kana makes
/// a text Japanese (Chinese text has none, and Japanese prose without kana is rare); Han without
/// kana is Chinese; Hangul is Korean, whatever else the text holds.
///
/// Kana counts when its letters ([`is_kana_letter`]) are at least one in twenty of the text's
/// Han and kana letters: Japanese prose runs at a third or more, a kanji-heavy Japanese title
/// such as 東京都の人口 at one in six, while a stray kana in a Chinese text (a typo, a quoted
/// name) stays below it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CjkScripts {
    /// Han ideographs or ideographic marks ([`is_ideographic`]).
    pub han: bool,
    /// Kana letters, at least one in twenty of the Han and kana letters.
    pub kana: bool,
    /// Hangul ([`is_hangul`]).
    pub hangul: bool,
}

impl CjkScripts {
    /// The scripts of every text in `texts` together (a chunk's title and text are one
    /// language decision).
    pub fn of<'a>(texts: impl IntoIterator<Item = &'a str>) -> CjkScripts {
        let mut s = CjkScripts::default();
        let (mut han, mut kana) = (0usize, 0usize);
        for c in texts.into_iter().flat_map(str::chars) {
            if is_ideographic(c) {
                han += 1;
            } else if is_kana_letter(c) {
                kana += 1;
            }
            s.hangul |= is_hangul(c);
        }
        s.han = han > 0;
        s.kana = kana_makes_japanese(han, kana);
        s
    }

    /// Japanese: the text has kana (see [`CjkScripts`]).
    pub fn japanese(self) -> bool {
        self.kana
    }

    /// Chinese: Han without kana.
    pub fn chinese(self) -> bool {
        self.han && !self.kana
    }

    /// Korean: the text has Hangul.
    pub fn korean(self) -> bool {
        self.hangul
    }
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

    #[test]
    fn kana_makes_japanese_han_alone_chinese_hangul_korean() {
        let ja = CjkScripts::of(["東京都に住んでいます"]);
        assert!(ja.japanese() && !ja.chinese() && !ja.korean());
        // Title and text decide together: a kanji-only title of a Japanese text is Japanese.
        let ja = CjkScripts::of(["富士山", "日本で一番高い山です"]);
        assert!(ja.japanese() && !ja.chinese());
        let zh = CjkScripts::of(["欲穷千里目，更上一层楼"]);
        assert!(zh.chinese() && !zh.japanese() && !zh.korean());
        assert!(CjkScripts::of(["人々"]).chinese());
        let ko = CjkScripts::of(["학교에서 공부합니다"]);
        assert!(ko.korean() && !ko.chinese() && !ko.japanese());
        // The katakana middle dot and a stray kana do not make Chinese text Japanese.
        assert!(CjkScripts::of(["《水调歌头・明月几时有》苏轼"]).chinese());
        let poem = "明月几时有？把酒问青天。不知天上宫阙，今夕是何年。我欲乘风归去，又恐琼楼玉宇，高处不胜寒。け";
        assert!(CjkScripts::of([poem]).chinese());
        assert!(CjkScripts::of(["東京都の人口"]).japanese());
        assert!(CjkScripts::of(["ラーメン"]).japanese() && !is_kana_letter('・'));
        let mixed = CjkScripts::of(["大韓民國 대한민국"]);
        assert!(mixed.korean() && mixed.chinese());
        assert_eq!(
            CjkScripts::of(["plain English, café 。，"]),
            CjkScripts::default()
        );
    }
}
