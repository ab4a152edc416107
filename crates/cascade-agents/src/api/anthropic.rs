//! Anthropic's Messages API: the request (`POST {base_url}/v1/messages`,
//! `x-api-key`, `anthropic-version`), its streamed reply
//! (`message_start`, `content_block_start` / `_delta` / `_stop` with
//! `text_delta` and `input_json_delta`, `message_delta` with the stop
//! reason and output tokens, `message_stop`, `error`) and the whole JSON
//! reply of a server that does not stream.
//!
//! The conversation is already in this API's shape, so the messages are
//! sent as they are kept.

use serde_json::{json, Value};

use super::conversation::{Block, Message, Role};
use super::sse::Event;
use super::tools::ToolSpec;
use super::transcript::Transcript;
use super::wire::{count, stream_error, CallError, Reply, StreamReader};
use crate::config::ApiSettings;
use crate::stream::Usage;

/// The API version header every request carries.
pub const VERSION: &str = "2023-06-01";

/// The request body of one turn.
pub fn request(
    api: &ApiSettings,
    system: &str,
    tools: &[&ToolSpec],
    messages: &[Message],
) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema()}))
        .collect();
    json!({
        "model": api.model,
        "max_tokens": api.max_tokens,
        "system": system,
        "messages": messages,
        "tools": tools,
        "stream": true,
    })
}

/// The headers of every request (the key when there is one).
pub fn headers(key: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![("anthropic-version", VERSION.to_string())];
    if let Some(k) = key {
        h.push(("x-api-key", k.to_string()));
    }
    h
}

/// A content block being streamed.
#[derive(Debug)]
enum Partial {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    /// Thinking and other blocks this agent does not use.
    Other,
}

/// The reader of one streamed reply.
#[derive(Debug, Default)]
pub struct Stream {
    blocks: Vec<(u64, Partial)>,
    usage: Usage,
    model: Option<String>,
    stop: Option<String>,
    started: bool,
    ended: bool,
}

impl Stream {
    pub fn new() -> Stream {
        Stream::default()
    }

    fn block(&mut self, index: u64) -> Option<&mut Partial> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }
}

impl StreamReader for Stream {
    fn event(&mut self, e: &Event, t: &mut Transcript) -> Result<(), CallError> {
        let v: Value = serde_json::from_str(&e.data).map_err(|err| {
            CallError::malformed(format!("an event that is not JSON ({err})"), &e.data)
        })?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(&e.name);
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                let m = v.get("message").ok_or_else(|| {
                    CallError::malformed("message_start without a message", &e.data)
                })?;
                self.started = true;
                self.model = m.get("model").and_then(Value::as_str).map(str::to_string);
                if let Some(u) = m.get("usage") {
                    add_usage(&mut self.usage, u);
                }
            }
            "content_block_start" => {
                let b = v.get("content_block").ok_or_else(|| {
                    CallError::malformed("content_block_start without a content_block", &e.data)
                })?;
                let partial = match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = b.get("text").and_then(Value::as_str).unwrap_or("");
                        t.text(text);
                        Partial::Text(text.to_string())
                    }
                    Some("tool_use") => Partial::Tool {
                        id: str_field(b, "id"),
                        name: str_field(b, "name"),
                        json: String::new(),
                    },
                    _ => Partial::Other,
                };
                self.blocks.push((index, partial));
            }
            "content_block_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                match (d.get("type").and_then(Value::as_str), self.block(index)) {
                    (Some("text_delta"), Some(Partial::Text(text))) => {
                        let piece = d.get("text").and_then(Value::as_str).unwrap_or("");
                        text.push_str(piece);
                        t.text(piece);
                    }
                    (Some("input_json_delta"), Some(Partial::Tool { json, .. })) => {
                        json.push_str(d.get("partial_json").and_then(Value::as_str).unwrap_or(""));
                    }
                    (_, None) => {
                        return Err(CallError::malformed(
                            format!("a delta for content block {index}, which never started"),
                            &e.data,
                        ))
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if matches!(self.block(index), Some(Partial::Text(_))) {
                    t.end_text();
                }
            }
            "message_delta" => {
                if let Some(s) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(s.to_string());
                }
                // The delta's output_tokens is the running total.
                if let Some(out) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = out;
                }
            }
            "message_stop" => self.ended = true,
            "ping" => {}
            "error" => {
                let err = v.get("error").unwrap_or(&Value::Null);
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                return Err(stream_error(
                    err.get("type").and_then(Value::as_str),
                    message,
                    &e.data,
                ));
            }
            // New event types are not ours to refuse.
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<Reply, CallError> {
        if !self.started {
            return Err(CallError::malformed("the stream had no message_start", ""));
        }
        if !self.ended && self.stop.is_none() {
            return Err(CallError::provider(
                crate::signal::SignalKind::ProviderError,
                None,
                "the connection closed before the reply was complete",
            ));
        }
        let mut content = Vec::new();
        let mut invalid = Vec::new();
        for (_, b) in std::mem::take(&mut self.blocks) {
            match b {
                Partial::Text(text) if !text.is_empty() => content.push(Block::Text { text }),
                Partial::Tool { id, name, json } => {
                    let input = if json.trim().is_empty() {
                        Ok(json!({}))
                    } else {
                        serde_json::from_str::<Value>(&json)
                    };
                    match input {
                        Ok(input @ Value::Object(_)) => {
                            content.push(Block::ToolUse { id, name, input })
                        }
                        _ => {
                            invalid.push((id.clone(), json));
                            content.push(Block::ToolUse {
                                id,
                                name,
                                input: json!({}),
                            });
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(Reply {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: std::mem::take(&mut self.usage),
            model: self.model.take(),
            stop: self.stop.take().unwrap_or_else(|| "end_turn".into()),
            invalid_inputs: invalid,
        })
    }
}

/// The reply of a server that answered with one JSON message.
pub fn whole(body: &str) -> Result<Reply, CallError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| CallError::malformed(format!("the reply is not JSON ({e})"), body))?;
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| CallError::malformed("the reply has no content", body))?;
    let mut content = Vec::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => content.push(Block::Text {
                text: str_field(b, "text"),
            }),
            Some("tool_use") => content.push(Block::ToolUse {
                id: str_field(b, "id"),
                name: str_field(b, "name"),
                input: b.get("input").cloned().unwrap_or_else(|| json!({})),
            }),
            _ => {}
        }
    }
    let mut usage = Usage::default();
    if let Some(u) = v.get("usage") {
        add_usage(&mut usage, u);
        usage.output_tokens = count(u, "output_tokens");
    }
    Ok(Reply {
        message: Message {
            role: Role::Assistant,
            content,
        },
        usage,
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        stop: v
            .get("stop_reason")
            .and_then(Value::as_str)
            .unwrap_or("end_turn")
            .to_string(),
        invalid_inputs: Vec::new(),
    })
}

/// The input side of a `usage` object: cache reads and writes count as
/// cached input (as Claude Code's own report is read).
fn add_usage(usage: &mut Usage, u: &Value) {
    usage.input_tokens += count(u, "input_tokens");
    usage.cached_input_tokens +=
        count(u, "cache_read_input_tokens") + count(u, "cache_creation_input_tokens");
    usage.output_tokens = count(u, "output_tokens");
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(lines: &[Value]) -> Vec<Event> {
        lines
            .iter()
            .map(|v| Event {
                name: v["type"].as_str().unwrap_or("").to_string(),
                data: v.to_string(),
            })
            .collect()
    }

    fn read(evs: &[Event]) -> (Result<Reply, CallError>, String) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(&log, "").unwrap();
        let mut t = Transcript::new(&log, cascade_process::LogLimit::default(), None);
        let mut s = Stream::new();
        for e in evs {
            if let Err(err) = s.event(e, &mut t) {
                return (Err(err), String::new());
            }
        }
        let r = s.finish();
        t.end_text();
        (r, t.captured().0.text_lossy())
    }

    #[test]
    fn a_streamed_tool_call_and_text_are_put_together() {
        let evs = events(&[
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 100, "cache_read_input_tokens": 20, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I will "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "write it.\n<review>PASS"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "</review>"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"file_path\": \"a.t"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "xt\", \"content\": \"hi\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "ping"}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 42}}),
            json!({"type": "message_stop"}),
        ]);
        let (reply, shown) = read(&evs);
        let reply = reply.unwrap();
        assert_eq!(reply.stop, "tool_use");
        assert_eq!(reply.model.as_deref(), Some("claude-x"));
        assert_eq!(
            (
                reply.usage.input_tokens,
                reply.usage.cached_input_tokens,
                reply.usage.output_tokens
            ),
            (100, 20, 42)
        );
        assert_eq!(
            reply.message.text(),
            "I will write it.\n<review>PASS</review>"
        );
        let calls: Vec<_> = reply.message.tool_uses().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].2, &json!({"file_path": "a.txt", "content": "hi"}));
        assert_eq!(shown, "I will write it.\n<review>PASS</review>\n");
    }

    #[test]
    fn an_error_event_is_classified_and_a_cut_stream_is_a_provider_error() {
        let evs = events(&[
            json!({"type": "message_start", "message": {"model": "m", "usage": {}}}),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]);
        let (r, _) = read(&evs);
        match r {
            Err(CallError::Provider(s)) => {
                assert_eq!(s.kind, crate::signal::SignalKind::ProviderError);
                assert_eq!(s.message, "Overloaded");
            }
            other => panic!("{other:?}"),
        }
        let cut = events(&[json!({"type": "message_start", "message": {"model": "m"}})]);
        let (r, _) = read(&cut);
        assert!(r.unwrap_err().to_string().contains("closed before"));
    }

    #[test]
    fn garbage_is_malformed_with_the_raw_text() {
        let (r, _) = read(&[Event {
            name: "message_start".into(),
            data: "<html>oops</html>".into(),
        }]);
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("malformed") && e.contains("<html>oops</html>"),
            "{e}"
        );
        let (r, _) = read(&[]);
        assert!(r.unwrap_err().to_string().contains("no message_start"));
    }

    #[test]
    fn a_tool_input_cut_off_is_reported_not_run() {
        let evs = events(&[
            json!({"type": "message_start", "message": {"model": "m"}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "Write"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"file_path\": \"a"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}),
            json!({"type": "message_stop"}),
        ]);
        let reply = read(&evs).0.unwrap();
        assert_eq!(
            reply.invalid_inputs,
            vec![("t".to_string(), "{\"file_path\": \"a".to_string())]
        );
    }

    #[test]
    fn a_whole_reply_is_read_too() {
        let body = json!({"model": "m", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "done"}],
            "usage": {"input_tokens": 5, "output_tokens": 2}})
        .to_string();
        let r = whole(&body).unwrap();
        assert_eq!(r.message.text(), "done");
        assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (5, 2));
        assert!(whole("{}").is_err());
    }

    #[test]
    fn the_request_carries_system_tools_and_messages() {
        let api = ApiSettings {
            provider: crate::config::Provider::Anthropic,
            model: "claude-x".into(),
            base_url: "http://127.0.0.1:1".into(),
            api_key_env: None,
            max_tokens: 100,
            max_turns: 5,
            price: None,
        };
        let spec: Vec<&ToolSpec> = super::super::tools::Tools::new(
            super::super::sandbox::Sandbox::new(
                std::path::Path::new("/"),
                super::super::sandbox::Writable::Tree,
            )
            .unwrap(),
            None,
        )
        .specs()
        .collect();
        let m = vec![Message {
            role: Role::User,
            content: vec![Block::Text { text: "go".into() }],
        }];
        let body = request(&api, "sys", &spec, &m);
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["messages"][0]["content"][0]["text"], "go");
        assert_eq!(body["tools"][0]["name"], "Read");
        assert_eq!(body["tools"][0]["input_schema"]["required"][0], "file_path");
        assert_eq!(headers(Some("k"))[1], ("x-api-key", "k".to_string()));
    }
}
