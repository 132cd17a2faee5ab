//! Plain text at most [`WIDTH`] columns wide: lines, section titles, word wrapping that keeps a
//! number with its unit, and cutting a long name. Every terminal text (the summary, a job's, a
//! comparison, a snapshot's, the collector's estimate) is laid out with these.

/// Width the summary fits in.
pub const WIDTH: usize = 100;

/// Appends a line.
pub fn line(out: &mut String, text: &str) {
    out.push_str(text);
    out.push('\n');
}

/// Appends a blank line and a section title.
pub fn section(out: &mut String, title: &str) {
    out.push('\n');
    line(out, title);
}

/// Cuts `text` to `width` characters, marking the cut with `~`.
pub fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('~');
    cut
}

/// Unit words that stay on the line of the number before them.
const UNITS: [&str; 13] = [
    "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "us", "ms", "s", "min", "h", "steps",
];

/// Splits `text` into words for wrapping, keeping a number and its unit together ("24.0 GiB"),
/// and the digit groups of a count ("1 840").
fn wrap_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let bare = word.trim_end_matches(|c: char| c.is_ascii_punctuation());
        let after_number = words
            .last()
            .is_some_and(|w| w.ends_with(|c: char| c.is_ascii_digit()));
        let digit_group = bare.len() == 3 && bare.chars().all(|c| c.is_ascii_digit());
        match words.last_mut() {
            Some(last) if after_number && (UNITS.contains(&bare) || digit_group) => {
                last.push(' ');
                last.push_str(word);
            }
            _ => words.push(word.to_owned()),
        }
    }
    words
}

/// Appends `text` word-wrapped to [`WIDTH`], the first line indented by `first` spaces and the
/// rest by `rest`. Words longer than a line are cut.
pub fn wrap(out: &mut String, text: &str, first: usize, rest: usize) {
    let mut current = " ".repeat(first);
    let mut empty = true;
    for word in wrap_words(text) {
        let len = current.chars().count();
        if !empty && len + 1 + word.chars().count() > WIDTH {
            line(out, &current);
            current = " ".repeat(rest);
            empty = true;
        }
        if !empty {
            current.push(' ');
        }
        let room = WIDTH.saturating_sub(current.chars().count());
        current.push_str(&shorten(&word, room.max(1)));
        empty = false;
    }
    if !empty {
        line(out, &current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_and_shortening() {
        let mut out = String::new();
        wrap(&mut out, &"word ".repeat(60), 2, 4);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() >= 3);
        assert!(lines[0].starts_with("  word") && lines[1].starts_with("    word"));
        assert!(lines.iter().all(|l| l.len() <= WIDTH));
        assert_eq!(
            wrap_words("free 24.0 GiB, of 1 840 steps; 3 s."),
            ["free", "24.0 GiB,", "of", "1 840 steps;", "3 s."]
        );
        assert_eq!(shorten("abcdef", 4), "abc~");
        assert_eq!(shorten("abc", 4), "abc");
    }
}
