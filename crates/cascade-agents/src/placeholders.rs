//! The `{name}` placeholders of agent argv elements: which exist, how a
//! template is checked when the config is loaded, and how one argv element
//! is filled in. Substitution works on one argument at a time, so a value
//! full of spaces, quotes or `$(...)` stays exactly one argument: nothing
//! here ever goes through a shell.

/// The placeholders an agent's `args`, `env` and `working_dir` may use.
pub const PLACEHOLDERS: [&str; 5] = [
    "prompt",
    "prompt_file",
    "working_dir",
    "story_id",
    "attempt",
];

/// The placeholders `resume_args` and `list_sessions_args` may use besides
/// [`PLACEHOLDERS`]: the agent's earlier session, by id or by its 1-based
/// index in the `list_sessions_args` listing (gemini's `--resume N`).
pub const SESSION_PLACEHOLDERS: [&str; 2] = ["session_id", "session_index"];

/// The values placeholders are replaced with for one invocation.
#[derive(Debug, Clone, Default)]
pub struct Values<'a> {
    pub prompt: &'a str,
    pub prompt_file: &'a str,
    pub working_dir: &'a str,
    pub story_id: &'a str,
    pub attempt: &'a str,
    /// The session to resume (`{session_id}`); empty outside `resume_args`.
    pub session_id: &'a str,
    /// Its 1-based index in the agent's session list (`{session_index}`).
    pub session_index: &'a str,
}

impl Values<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "prompt" => Some(self.prompt),
            "prompt_file" => Some(self.prompt_file),
            "working_dir" => Some(self.working_dir),
            "story_id" => Some(self.story_id),
            "attempt" => Some(self.attempt),
            "session_id" => Some(self.session_id),
            "session_index" => Some(self.session_index),
            _ => None,
        }
    }
}

/// A `{...}` token that looks like a placeholder, with its byte range.
struct Token<'t> {
    start: usize,
    end: usize,
    name: &'t str,
}

/// Finds `{identifier}` tokens. Braces around anything that is not a plain
/// identifier (JSON snippets, `{}` or `{ a }`) are left alone on purpose, so
/// agents can still be given literal JSON arguments.
fn tokens(template: &str) -> Vec<Token<'_>> {
    let bytes = template.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            let rest = &template[i + 1..];
            let len = rest
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            if len > 0 && rest.as_bytes().get(len) == Some(&b'}') {
                let name = &rest[..len];
                if name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic()) {
                    out.push(Token {
                        start: i,
                        end: i + len + 2,
                        name,
                    });
                    i += len + 2;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

/// The first unknown placeholder name in `template`, if any.
pub fn unknown_placeholder(template: &str) -> Option<String> {
    tokens(template)
        .into_iter()
        .find(|t| !PLACEHOLDERS.contains(&t.name))
        .map(|t| t.name.to_string())
}

/// Like [`unknown_placeholder`], for `resume_args` / `list_sessions_args`,
/// which may also name the [`SESSION_PLACEHOLDERS`].
pub fn unknown_session_placeholder(template: &str) -> Option<String> {
    tokens(template)
        .into_iter()
        .find(|t| !PLACEHOLDERS.contains(&t.name) && !SESSION_PLACEHOLDERS.contains(&t.name))
        .map(|t| t.name.to_string())
}

/// Whether `template` mentions placeholder `name`.
pub fn mentions(template: &str, name: &str) -> bool {
    tokens(template).iter().any(|t| t.name == name)
}

/// `template` with every known placeholder replaced. Values are inserted
/// verbatim and never rescanned, so a prompt containing `{attempt}` stays as
/// written.
pub fn substitute(template: &str, values: &Values<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut last = 0;
    for token in tokens(template) {
        if let Some(value) = values.get(token.name) {
            out.push_str(&template[last..token.start]);
            out.push_str(value);
            last = token.end;
        }
    }
    out.push_str(&template[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values<'static> {
        Values {
            prompt: "do {attempt} $(rm -rf /) \"q\"",
            prompt_file: "/p/f.md",
            working_dir: "/w",
            story_id: "story-001",
            attempt: "2",
            session_id: "sess-1",
            session_index: "3",
        }
    }

    #[test]
    fn session_placeholders_only_where_allowed() {
        let v = values();
        assert_eq!(substitute("--resume={session_id}", &v), "--resume=sess-1");
        assert_eq!(substitute("{session_index}", &v), "3");
        assert_eq!(
            unknown_placeholder("{session_id}"),
            Some("session_id".into())
        );
        assert_eq!(
            unknown_session_placeholder("{session_id} {session_index} {prompt}"),
            None
        );
        assert_eq!(
            unknown_session_placeholder("{sesion_id}"),
            Some("sesion_id".into())
        );
    }

    #[test]
    fn substitutes_known_placeholders_once() {
        let v = values();
        assert_eq!(substitute("{prompt}", &v), "do {attempt} $(rm -rf /) \"q\"");
        assert_eq!(
            substitute("--file={prompt_file}:{story_id}#{attempt}", &v),
            "--file=/p/f.md:story-001#2"
        );
        assert_eq!(substitute("{working_dir}", &v), "/w");
    }

    #[test]
    fn leaves_json_and_unknown_tokens_alone() {
        let v = values();
        assert_eq!(substitute(r#"{"a": 1}"#, &v), r#"{"a": 1}"#);
        assert_eq!(substitute("{}", &v), "{}");
        assert_eq!(substitute("{nope}", &v), "{nope}");
        assert_eq!(unknown_placeholder(r#"{"a": {prompt}}"#), None);
        assert_eq!(unknown_placeholder("x {promt} y"), Some("promt".into()));
        assert_eq!(unknown_placeholder("{1}"), None);
    }

    #[test]
    fn mentions_finds_placeholders() {
        assert!(mentions("--message={prompt}", "prompt"));
        assert!(!mentions("--message={prompt_file}", "prompt"));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the prompt holds (braces, quotes, `$()`, placeholders), it
        /// is inserted verbatim and exactly once.
        #[test]
        fn prompt_is_inserted_verbatim(prompt in any::<String>(), prefix in "[a-z=-]{0,8}") {
            let v = Values { prompt: &prompt, attempt: "1", ..Default::default() };
            let template = format!("{prefix}{{prompt}}");
            prop_assert_eq!(substitute(&template, &v), format!("{prefix}{prompt}"));
        }

        /// Templates without placeholders come back unchanged.
        #[test]
        fn plain_templates_are_unchanged(t in "[^{}]*") {
            prop_assert_eq!(substitute(&t, &Values::default()), t);
        }
    }
}
