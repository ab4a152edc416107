//! The api agent's conversation: the messages exchanged with the model, in
//! one provider-neutral shape, and where they are kept between calls.
//!
//! The shape is the Messages API's own (user and assistant messages made of
//! `text`, `tool_use` and `tool_result` blocks), so Anthropic requests send
//! it as it is and the Chat Completions adapter translates it. A session is
//! continued (planning's self-review and revise, the engine's retries) by
//! loading the kept conversation and resending it with the new prompt: the
//! file `<cascade_dir>/sessions/<id>.json`, written after every model turn,
//! so a run that fails half-way still leaves what it did to continue from.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the session file format.
const SESSION_VERSION: u32 = 1;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    /// The model asks for a tool call.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// What a tool call gave, sent back in the next user message.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    /// The message's text blocks, joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The tool calls the message asks for: (id, name, input).
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// A conversation and the session id it is kept under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub version: u32,
    pub id: String,
    /// `provider:model` it was held with (a note for people reading the file).
    pub model: String,
    pub messages: Vec<Message>,
}

/// The session file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot read the api session '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the api session '{}' is not a conversation cascade wrote ({message}); delete it to start the session over", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("cannot write the api session '{}': {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Conversation {
    /// A new, empty conversation with a fresh id.
    pub fn new(model: String) -> Conversation {
        Conversation {
            version: SESSION_VERSION,
            id: new_id(),
            model,
            messages: Vec::new(),
        }
    }

    /// `<cascade_dir>/sessions/<id>.json`; `None` for an id that is not a
    /// plain file name (ids come back from state files people can edit).
    pub fn path(cascade_dir: &Path, id: &str) -> Option<PathBuf> {
        let plain = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        plain.then(|| cascade_dir.join("sessions").join(format!("{id}.json")))
    }

    /// The kept conversation `id`, or `Ok(None)` when there is none.
    pub fn load(cascade_dir: &Path, id: &str) -> Result<Option<Conversation>, SessionError> {
        let Some(path) = Conversation::path(cascade_dir, id) else {
            return Ok(None);
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(SessionError::Read { path, source }),
        };
        let mut conv: Conversation =
            serde_json::from_slice(&bytes).map_err(|e| SessionError::Parse {
                path: path.clone(),
                message: e.to_string(),
            })?;
        if conv.version != SESSION_VERSION || conv.id != id {
            return Err(SessionError::Parse {
                path,
                message: format!("version {} id '{}'", conv.version, conv.id),
            });
        }
        conv.drop_empty_turns();
        conv.answer_open_calls();
        Ok(Some(conv))
    }

    /// Writes the conversation (temp file + rename), readable by its owner
    /// only: it holds prompts, file contents and tool output.
    pub fn save(&self, cascade_dir: &Path) -> Result<(), SessionError> {
        let Some(path) = Conversation::path(cascade_dir, &self.id) else {
            return Ok(());
        };
        let bytes = serde_json::to_vec(self).map_err(|e| SessionError::Write {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        cascade_fs::write_atomic_private(&path, &bytes, cascade_fs::Durability::Synced)
            .map_err(|source| SessionError::Write { path, source })
    }

    /// Adds the user's `text`: to the last message when that is the user's
    /// (tool results of a run that stopped before the model answered them),
    /// since the APIs want user and assistant to alternate.
    pub fn push_user_text(&mut self, text: String) {
        match self.messages.last_mut() {
            Some(m) if m.role == Role::User => m.content.push(Block::Text { text }),
            _ => self.messages.push(Message {
                role: Role::User,
                content: vec![Block::Text { text }],
            }),
        }
    }

    /// Adds the model's reply; an empty one (no blocks: Anthropic's
    /// `content: []` with `end_turn` after tool use) is not kept, since
    /// every provider refuses to be sent an empty message and a kept one
    /// would fail each request that continues the session. Returns whether
    /// the reply was kept.
    pub fn push_reply(&mut self, reply: Message) -> bool {
        let kept = !is_empty(&reply);
        if kept {
            self.messages.push(reply);
        }
        kept
    }

    /// Removes empty text blocks and empty messages (a session written
    /// before [`Conversation::push_reply`] existed may hold one) and joins
    /// the neighbours that removal leaves with the same role, so user and
    /// assistant still alternate.
    fn drop_empty_turns(&mut self) {
        let mut kept: Vec<Message> = Vec::with_capacity(self.messages.len());
        for mut m in std::mem::take(&mut self.messages) {
            m.content
                .retain(|b| !matches!(b, Block::Text { text } if text.trim().is_empty()));
            if m.content.is_empty() {
                continue;
            }
            match kept.last_mut() {
                Some(prev) if prev.role == m.role => prev.content.append(&mut m.content),
                _ => kept.push(m),
            }
        }
        self.messages = kept;
    }

    /// Tool calls the conversation ends with that never got their results
    /// (a run stopped while they ran) are answered as interrupted: every
    /// API refuses a tool call without its result.
    fn answer_open_calls(&mut self) {
        let Some(last) = self.messages.last() else {
            return;
        };
        if last.role != Role::Assistant {
            return;
        }
        let results: Vec<Block> = last
            .tool_uses()
            .map(|(id, _, _)| Block::ToolResult {
                tool_use_id: id.to_string(),
                content: "interrupted: the run stopped before this tool call finished".into(),
                is_error: true,
            })
            .collect();
        if !results.is_empty() {
            self.messages.push(Message {
                role: Role::User,
                content: results,
            });
        }
    }
}

/// Whether a message says nothing (no blocks, or only blank text).
fn is_empty(m: &Message) -> bool {
    m.content
        .iter()
        .all(|b| matches!(b, Block::Text { text } if text.trim().is_empty()))
}

/// A session id: `api-` and the time and process in hex, plus a counter,
/// unique on this machine without a random source.
fn new_id() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "api-{nanos:x}-{:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_are_the_messages_api_shape() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text { text: "hi".into() },
                Block::ToolUse {
                    id: "t1".into(),
                    name: "Read".into(),
                    input: json!({"file_path": "a"}),
                },
            ],
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "hi"},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a"}}]})
        );
        let r = Block::ToolResult {
            tool_use_id: "t1".into(),
            content: "x".into(),
            is_error: false,
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"type": "tool_result", "tool_use_id": "t1", "content": "x"})
        );
    }

    #[test]
    fn saves_loads_and_answers_calls_left_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Conversation::new("anthropic:m".into());
        c.push_user_text("do it".into());
        c.messages.push(Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: "t1".into(),
                name: "RunGates".into(),
                input: json!({}),
            }],
        });
        c.save(dir.path()).unwrap();
        // The session holds prompts and file contents: its owner's only.
        let path = Conversation::path(dir.path(), &c.id).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let loaded = Conversation::load(dir.path(), &c.id).unwrap().unwrap();
        assert_eq!(loaded.messages.len(), 3);
        assert!(matches!(
            &loaded.messages[2].content[0],
            Block::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "t1"
        ));
        // The next prompt joins the user message holding those results.
        let mut next = loaded;
        next.push_user_text("again".into());
        assert_eq!(next.messages.len(), 3);
        assert_eq!(next.messages[2].text(), "again");
    }

    #[test]
    fn an_empty_reply_is_not_kept_and_a_kept_one_is_dropped_on_load() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Conversation::new("anthropic:m".into());
        c.push_user_text("do it".into());
        let call = Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: "t1".into(),
                name: "Read".into(),
                input: json!({}),
            }],
        };
        assert!(c.push_reply(call));
        c.messages.push(Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: "t1".into(),
                content: "x".into(),
                is_error: false,
            }],
        });
        let empty = Message {
            role: Role::Assistant,
            content: Vec::new(),
        };
        assert!(!c.push_reply(empty.clone()));
        assert_eq!(c.messages.len(), 3);
        // A session kept by an older cascade, with the empty reply and the
        // next prompt after it: loaded without it, the two user messages one.
        c.messages.push(empty);
        c.messages.push(Message {
            role: Role::User,
            content: vec![Block::Text {
                text: "again".into(),
            }],
        });
        c.save(dir.path()).unwrap();
        let loaded = Conversation::load(dir.path(), &c.id).unwrap().unwrap();
        assert_eq!(loaded.messages.len(), 3);
        assert!(loaded.messages.iter().all(|m| !m.content.is_empty()));
        assert_eq!(loaded.messages[2].content.len(), 2);
        assert_eq!(loaded.messages[2].text(), "again");
    }

    #[test]
    fn unknown_and_unsafe_ids_have_no_session() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Conversation::load(dir.path(), "api-none")
            .unwrap()
            .is_none());
        assert!(Conversation::path(dir.path(), "../x").is_none());
        assert!(Conversation::path(dir.path(), "").is_none());
        std::fs::create_dir_all(dir.path().join("sessions")).unwrap();
        std::fs::write(dir.path().join("sessions/api-bad.json"), "{").unwrap();
        let e = Conversation::load(dir.path(), "api-bad").unwrap_err();
        assert!(e.to_string().contains("delete it"), "{e}");
        // Two ids made at once differ.
        assert_ne!(new_id(), new_id());
    }
}
