//! Excuses: checks in code that let a stub finding go because the stub is
//! what the language asks for. `python-abstract` reads the Python around a
//! function whose body is `pass`, `...` or `raise NotImplementedError`:
//!
//! - `@abstractmethod` counts only in a class that really is abstract: its
//!   bases name `ABC`, `ABCMeta` (`metaclass=`) or `Protocol`, or a class of
//!   the same file that is abstract, or a class defined elsewhere (which
//!   may be an ABC: the benefit of the doubt). On a plain class it does
//!   nothing, and the finding says so (the decorator trick).
//! - `@overload` counts only when the function has an implementation: a
//!   definition of the same name at the same depth without `@overload`.
//! - A member of a `Protocol` is a declaration.
//! - A `.pyi` file is all declarations.

use regex::Regex;
use std::sync::OnceLock;

use crate::scan::{blank, indent, Prepared};

/// Bases of a class found in a file this deep at most.
const MAX_DEPTH: usize = 8;

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    // The patterns are constants of this file, tested below.
    cell.get_or_init(|| Regex::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}")))
}

fn class_header() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"^\s*class\s+([A-Za-z_]\w*)\s*(?:\((.*)\))?\s*:")
}

fn def_name() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)")
}

fn abstract_decorator() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"^\s*@(?:abc\.)?abstract\w*\b")
}

fn overload_decorator() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"^\s*@(?:typing\.|typing_extensions\.)?overload\b")
}

/// `Ok(())`: the stub at header line `h` is excused. `Err(note)`: it is
/// not, with a note for the message when a decorator pretended it was.
pub(crate) fn python_abstract(p: &Prepared, h: usize) -> Result<(), Option<String>> {
    if p.diff.path.ends_with(".pyi") {
        return Ok(());
    }
    let decorators = decorators_of(p, h);
    let class = enclosing_class(p, h);
    let kind = class.as_ref().map(|(_, bases)| class_kind(p, bases, 0));
    if kind == Some(Kind::Protocol) {
        return Ok(());
    }
    if decorators.iter().any(|d| overload_decorator().is_match(d)) {
        return if has_implementation(p, h) {
            Ok(())
        } else {
            Err(Some(
                "`@overload` without an implementation of the same name".into(),
            ))
        };
    }
    if decorators.iter().any(|d| abstract_decorator().is_match(d)) {
        return match (class, kind) {
            (Some(_), Some(Kind::Abstract | Kind::Unknown)) => Ok(()),
            (Some((name, _)), _) => Err(Some(format!(
                "`@abstractmethod` does nothing here: class '{name}' is not abstract (no ABC or ABCMeta among its bases)"
            ))),
            (None, _) => Err(Some("`@abstractmethod` outside a class does nothing".into())),
        };
    }
    Err(None)
}

/// The decorator lines right above line `h`.
fn decorators_of<'a>(p: &Prepared<'a>, h: usize) -> Vec<&'a str> {
    let mut out = Vec::new();
    for j in (0..h).rev() {
        let code = p.lines[j].code.trim();
        if code.starts_with('@') {
            out.push(p.raw.get(j).copied().unwrap_or(""));
        } else if !blank(&p.lines[j]) {
            break;
        }
    }
    out
}

/// The class that line `h` belongs to (the nearest less indented line
/// above, when it is a class header): its name and bases.
pub(crate) fn enclosing_class(p: &Prepared, h: usize) -> Option<(String, String)> {
    let own = indent(p.raw.get(h)?);
    let c = (0..h)
        .rev()
        .find(|&j| !blank(&p.lines[j]) && p.raw.get(j).is_some_and(|l| indent(l) < own))?;
    let caps = class_header().captures(&p.lines[c].code_strings)?;
    Some((
        caps.get(1)?.as_str().to_string(),
        caps.get(2).map_or("", |m| m.as_str()).to_string(),
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Protocol,
    Abstract,
    /// Bases defined elsewhere: it may be abstract.
    Unknown,
    Concrete,
}

/// What a class with these bases is, following bases defined in the file.
fn class_kind(p: &Prepared, bases: &str, depth: usize) -> Kind {
    let mut kind = Kind::Concrete;
    for base in split_top_level(bases) {
        let base = base.trim();
        if let Some(meta) = base.strip_prefix("metaclass") {
            if meta.contains("ABCMeta") {
                kind = kind.max_with(Kind::Abstract);
            }
            continue;
        }
        if base.is_empty() || base.contains('=') {
            continue;
        }
        // `typing.Protocol[T]` -> `Protocol`.
        let name = base.split('[').next().unwrap_or(base).trim();
        let last = name.rsplit('.').next().unwrap_or(name);
        let this = match last {
            "Protocol" => Kind::Protocol,
            "ABC" | "ABCMeta" => Kind::Abstract,
            "object" | "Exception" | "BaseException" | "Generic" | "NamedTuple" | "TypedDict"
            | "Enum" | "IntEnum" | "dict" | "list" | "str" | "int" | "float" | "tuple" | "set"
            | "TestCase" => Kind::Concrete,
            _ if depth >= MAX_DEPTH => Kind::Unknown,
            // A subclass of a protocol is a protocol only when it says
            // `Protocol` itself; otherwise it is abstract (ABCMeta's rules).
            _ => match class_in_file(p, last) {
                Some(bases) => match class_kind(p, &bases, depth + 1) {
                    Kind::Protocol => Kind::Abstract,
                    k => k,
                },
                None => Kind::Unknown,
            },
        };
        kind = kind.max_with(this);
    }
    kind
}

impl Kind {
    /// The stronger of two: a protocol beats abstract beats unknown beats concrete.
    fn max_with(self, other: Kind) -> Kind {
        let rank = |k: Kind| match k {
            Kind::Concrete => 0,
            Kind::Unknown => 1,
            Kind::Abstract => 2,
            Kind::Protocol => 3,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// The bases of class `name` when this file defines it.
fn class_in_file(p: &Prepared, name: &str) -> Option<String> {
    p.lines.iter().find_map(|l| {
        let caps = class_header().captures(&l.code_strings)?;
        (caps.get(1)?.as_str() == name).then(|| caps.get(2).map_or("", |m| m.as_str()).to_string())
    })
}

/// `a, b[c, d], metaclass=M` -> `a`, `b[c, d]`, `metaclass=M`.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut from) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

/// Whether the function at line `h` has a definition of the same name at
/// the same indentation that is not an `@overload`.
fn has_implementation(p: &Prepared, h: usize) -> bool {
    let Some(name) = def_name()
        .captures(&p.lines[h].code)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_string())
    else {
        return false;
    };
    let own = p.raw.get(h).map_or(0, |l| indent(l));
    (0..p.lines.len()).any(|j| {
        j != h
            && p.raw.get(j).is_some_and(|l| indent(l) == own)
            && def_name()
                .captures(&p.lines[j].code)
                .and_then(|c| c.get(1))
                .is_some_and(|m| m.as_str() == name)
            && !decorators_of(p, j)
                .iter()
                .any(|d| overload_decorator().is_match(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_compile_and_bases_split() {
        assert!(class_header().is_match("class A(B, metaclass=ABCMeta):"));
        assert!(def_name().is_match("async def f(x):"));
        assert!(abstract_decorator().is_match("    @abc.abstractmethod"));
        assert!(overload_decorator().is_match("@typing.overload"));
        assert_eq!(
            split_top_level("A, Generic[K, V], metaclass=M"),
            ["A", " Generic[K, V]", " metaclass=M"]
        );
    }
}
