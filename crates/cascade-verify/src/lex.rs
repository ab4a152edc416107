//! Splits source text into its code, its string contents and its comments,
//! line by line, so a rule about code never fires on a `todo!()` in a
//! comment or a string, and a rule about comments never fires on code.
//!
//! One small lexer serves every language; a [`Syntax`] says which comment
//! and string delimiters a language has. It knows nothing of grammar beyond
//! that (no regex literals, no string interpolation), which is all the rules
//! need: a line's code with string contents blanked (`"..."` becomes `""`),
//! the same with the contents kept, and its comment text; and where a
//! braced block closes ([`block_close`]), by the braces of code alone.

/// A string delimiter pair.
#[derive(Debug, Clone, Copy)]
pub struct Quote {
    pub open: &'static str,
    pub close: &'static str,
    /// Backslash escapes the next character.
    pub escapes: bool,
}

/// The comment and string syntax of a language.
#[derive(Debug, Clone, Copy)]
pub struct Syntax {
    pub line_comment: &'static [&'static str],
    pub block_comment: Option<(&'static str, &'static str)>,
    /// Block comments nest (Rust).
    pub nested_blocks: bool,
    /// Longest opener first.
    pub quotes: &'static [Quote],
    /// `'` starts a char literal only when it closes within two characters
    /// (Rust lifetimes, `'a`, are code).
    pub rust_chars: bool,
}

const fn q(open: &'static str, close: &'static str, escapes: bool) -> Quote {
    Quote {
        open,
        close,
        escapes,
    }
}

pub const RUST: Syntax = Syntax {
    line_comment: &["//"],
    block_comment: Some(("/*", "*/")),
    nested_blocks: true,
    quotes: &[
        q("r##\"", "\"##", false),
        q("r#\"", "\"#", false),
        q("br\"", "\"", false),
        q("r\"", "\"", false),
        q("\"", "\"", true),
    ],
    rust_chars: true,
};

pub const PYTHON: Syntax = Syntax {
    line_comment: &["#"],
    block_comment: None,
    nested_blocks: false,
    quotes: &[
        q("\"\"\"", "\"\"\"", true),
        q("'''", "'''", true),
        q("\"", "\"", true),
        q("'", "'", true),
    ],
    rust_chars: false,
};

pub const C_LIKE: Syntax = Syntax {
    line_comment: &["//"],
    block_comment: Some(("/*", "*/")),
    nested_blocks: false,
    quotes: &[q("`", "`", true), q("\"", "\"", true), q("'", "'", true)],
    rust_chars: false,
};

pub const GO: Syntax = Syntax {
    line_comment: &["//"],
    block_comment: Some(("/*", "*/")),
    nested_blocks: false,
    quotes: &[q("`", "`", false), q("\"", "\"", true), q("'", "'", true)],
    rust_chars: false,
};

/// No comment or string syntax known: everything is code.
pub const PLAIN: Syntax = Syntax {
    line_comment: &[],
    block_comment: None,
    nested_blocks: false,
    quotes: &[],
    rust_chars: false,
};

/// One line, split.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line {
    /// Code with comments removed and string contents blanked.
    pub code: String,
    /// Code with comments removed, string contents kept.
    pub code_strings: String,
    /// The comments' text.
    pub comment: String,
}

#[derive(Clone, Copy)]
enum State {
    Code,
    LineComment,
    Block(u32),
    Str(usize),
}

/// Splits `text` into lines (1-based index = position + 1).
pub fn lex(text: &str, syntax: &Syntax) -> Vec<Line> {
    let mut out = Vec::with_capacity(text.len() / 32 + 1);
    let mut line = Line::default();
    let mut state = State::Code;
    let mut i = 0;
    let bytes = text.as_bytes();
    let special = special_bytes(syntax);
    while i < text.len() {
        // The run of bytes up to the next one any token can start with is
        // copied at once (every token is ASCII, so this never splits a char).
        let end = bytes[i..]
            .iter()
            .position(|b| special[*b as usize])
            .map_or(text.len(), |p| i + p);
        if end > i {
            let run = &text[i..end];
            match state {
                State::Code => {
                    line.code.push_str(run);
                    line.code_strings.push_str(run);
                }
                State::LineComment | State::Block(_) => line.comment.push_str(run),
                State::Str(_) => line.code_strings.push_str(run),
            }
            i = end;
            continue;
        }
        let rest = &text[i..];
        let c = rest.chars().next().unwrap_or('\n');
        if c == '\n' {
            out.push(std::mem::take(&mut line));
            if matches!(state, State::LineComment) {
                state = State::Code;
            }
            i += 1;
            continue;
        }
        match state {
            State::Code => {
                if let Some(tok) = syntax.line_comment.iter().find(|t| rest.starts_with(**t)) {
                    state = State::LineComment;
                    i += tok.len();
                    continue;
                }
                if let Some((open, _)) = syntax.block_comment {
                    if rest.starts_with(open) {
                        state = State::Block(1);
                        i += open.len();
                        continue;
                    }
                }
                // A quote opener must not continue an identifier (`br"` in
                // `abr"` is not a raw string).
                let prev_ident =
                    i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
                if let Some(k) = syntax.quotes.iter().position(|qt| {
                    rest.starts_with(qt.open)
                        && !(prev_ident && qt.open.starts_with(|ch: char| ch.is_ascii_alphabetic()))
                }) {
                    let qt = syntax.quotes[k];
                    line.code.push_str(qt.open);
                    line.code_strings.push_str(qt.open);
                    state = State::Str(k);
                    i += qt.open.len();
                    continue;
                }
                if syntax.rust_chars && c == '\'' {
                    // 'x' or '\n' (a char literal) versus 'a (a lifetime).
                    let after: Vec<char> = rest.chars().skip(1).take(4).collect();
                    let len = match after.as_slice() {
                        ['\\', _, '\'', ..] => Some(4),
                        [ch, '\'', ..] if *ch != '\'' => Some(3),
                        ['\\', ..] => rest[1..].find('\'').map(|p| p + 2),
                        _ => None,
                    };
                    if let Some(len) = len {
                        let lit = &rest[..len.min(rest.len())];
                        line.code.push_str("''");
                        line.code_strings.push_str(lit);
                        i += lit.len();
                        continue;
                    }
                }
                line.code.push(c);
                line.code_strings.push(c);
                i += c.len_utf8();
            }
            State::LineComment => {
                line.comment.push(c);
                i += c.len_utf8();
            }
            State::Block(depth) => {
                let (open, close) = syntax.block_comment.unwrap_or(("/*", "*/"));
                if rest.starts_with(close) {
                    state = if depth > 1 {
                        State::Block(depth - 1)
                    } else {
                        State::Code
                    };
                    line.comment.push(' ');
                    i += close.len();
                } else if syntax.nested_blocks && rest.starts_with(open) {
                    state = State::Block(depth + 1);
                    i += open.len();
                } else {
                    line.comment.push(c);
                    i += c.len_utf8();
                }
            }
            State::Str(k) => {
                let qt = syntax.quotes[k];
                if qt.escapes && c == '\\' {
                    let next = rest.chars().nth(1);
                    match next {
                        Some('\n') | None => {
                            line.code_strings.push(c);
                            i += 1;
                        }
                        Some(n) => {
                            line.code_strings.push(c);
                            line.code_strings.push(n);
                            i += 1 + n.len_utf8();
                        }
                    }
                } else if rest.starts_with(qt.close) {
                    line.code.push_str(qt.close);
                    line.code_strings.push_str(qt.close);
                    state = State::Code;
                    i += qt.close.len();
                } else {
                    line.code_strings.push(c);
                    i += c.len_utf8();
                }
            }
        }
    }
    if !text.is_empty() && !text.ends_with('\n') {
        out.push(line);
    }
    out
}

/// The bytes a token of `syntax` (or a line end, or an escape) starts with.
fn special_bytes(syntax: &Syntax) -> [bool; 256] {
    let mut set = [false; 256];
    let mut add = |s: &str| {
        if let Some(b) = s.bytes().next() {
            set[b as usize] = true;
        }
    };
    add("\n");
    add("\\");
    for t in syntax.line_comment {
        add(t);
    }
    if let Some((open, close)) = syntax.block_comment {
        add(open);
        add(close);
    }
    for q in syntax.quotes {
        add(q.open);
        add(q.close);
    }
    if syntax.rust_chars {
        add("'");
    }
    set
}

/// The line where the braced block opened on line `from` (or the first
/// line after it with a `{`) closes, counting the braces of code only.
pub fn block_close(lines: &[Line], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut opened = false;
    for (j, l) in lines.iter().enumerate().skip(from) {
        for c in l.code.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        if opened && depth <= 0 {
            return Some(j);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str, s: &Syntax) -> Line {
        lex(text, s).remove(0)
    }

    #[test]
    fn comments_and_strings_are_told_apart() {
        let l = one("let x = \"todo!()\"; // todo!() later\n", &RUST);
        assert_eq!(l.code.trim_end(), "let x = \"\";");
        assert_eq!(l.code_strings.trim_end(), "let x = \"todo!()\";");
        assert_eq!(l.comment, " todo!() later");
        let l = one("s = '# not a comment'  # real\n", &PYTHON);
        assert_eq!(l.code.trim_end(), "s = ''");
        assert_eq!(l.comment, " real");
    }

    #[test]
    fn multi_line_strings_and_comments_carry_over() {
        let lines = lex("a = \"\"\"\npass\n\"\"\"\nb\n", &PYTHON);
        assert_eq!(lines[1].code, "");
        assert_eq!(lines[1].code_strings, "pass");
        assert_eq!(lines[3].code, "b");
        let lines = lex("/* one /* two */\ntodo!()\n*/ x\n", &RUST);
        assert_eq!(lines[1].code, "", "nested block comment still open");
        assert_eq!(lines[2].code, " x");
        let lines = lex("x := `raw\ntext`\n", &GO);
        assert_eq!(lines[1].code, "`");
    }

    #[test]
    fn rust_lifetimes_are_code_and_chars_are_literals() {
        let l = one("fn f<'a>(x: &'a str) -> char { '\"' }", &RUST);
        assert_eq!(l.code, "fn f<'a>(x: &'a str) -> char { '' }");
        let l = one("let r = r#\"a \"quoted\" todo!()\"#;", &RUST);
        assert_eq!(l.code, "let r = r#\"\"#;");
        let l = one("let c = '\\n'; todo!()", &RUST);
        assert_eq!(l.code, "let c = ''; todo!()");
    }

    #[test]
    fn escapes_do_not_close_strings() {
        let l = one(r#"x = "a \" // b"; y"#, &C_LIKE);
        assert_eq!(l.code, r#"x = ""; y"#);
        assert!(l.comment.is_empty());
    }
}
