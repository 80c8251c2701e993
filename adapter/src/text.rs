//! Text from peers (frame contents, request fields, error messages that quote them) made safe
//! to put in a log line or echo back: one line, no terminal control sequences, bounded length.

/// `s` with every control character (newline, carriage return, ESC, DEL, C1 controls, ...) and
/// every Unicode format character (bidirectional overrides) escaped as `\u{..}`, backslashes
/// doubled, and cut to at most `max` characters (marked with `...`).
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max) + 8);
    for (n, c) in s.chars().enumerate() {
        if n >= max {
            out.push_str("...");
            break;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() || is_format(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// Longest peer-supplied text put in one log field or error reply.
pub(crate) const MAX_ECHO: usize = 512;

/// [`printable`] with the default bound `MAX_ECHO`.
pub fn echo(s: &str) -> String {
    printable(s, MAX_ECHO)
}

/// Invisible characters that reorder or hide text on a terminal (Unicode category Cf, the ones
/// that matter: bidi controls, zero-width characters, BOM).
fn is_format(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x061C | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064
        | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_cannot_forge_lines() {
        let forged =
            "x\n2026-01-01T00:00:00Z  INFO prrte_k8s::agent: authenticated\r\x1b[2K\u{202e}";
        let p = echo(forged);
        assert!(
            !p.contains('\n')
                && !p.contains('\r')
                && !p.contains('\x1b')
                && !p.contains('\u{202e}')
        );
        assert!(p.starts_with("x\\u{a}2026"), "{p}");
        assert_eq!(printable("a\\b", 10), "a\\\\b");
        assert_eq!(printable("héllo wörld", 5), "héllo...");
        assert_eq!(echo("plain text: ok"), "plain text: ok");
    }
}
