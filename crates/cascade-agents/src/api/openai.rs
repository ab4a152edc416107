//! OpenAI's Chat Completions API, which local model servers (Ollama, vLLM,
//! llama.cpp's server, LM Studio) speak too: the request (`POST
//! {base_url}/v1/chat/completions`, `Authorization: Bearer`), its streamed
//! reply (`choices[0].delta.content` and `delta.tool_calls` pieces keyed by
//! index, `finish_reason`, a last chunk with `usage`, `data: [DONE]`) and
//! the whole JSON reply of a server that does not stream.
//!
//! The kept conversation is translated: an assistant message's tool calls
//! become `tool_calls` with their input as a JSON string, and a user
//! message's tool results become `tool` messages before its text.

use serde_json::{json, Value};

use super::conversation::{Block, Message, Role};
use super::sse::Event;
use super::tools::ToolSpec;
use super::transcript::Transcript;
use super::wire::{count, stream_error, CallError, Reply, StreamReader};
use crate::config::{ApiSettings, Provider};
use crate::stream::Usage;

/// The request body of one turn.
pub fn request(
    api: &ApiSettings,
    system: &str,
    tools: &[&ToolSpec],
    messages: &[Message],
) -> Value {
    let mut out = vec![json!({"role": "system", "content": system})];
    for m in messages {
        out.extend(translate(m));
    }
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema()}})
        })
        .collect();
    let mut body = json!({
        "model": api.model,
        "messages": out,
        "tools": tools,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    // OpenAI's own endpoint has replaced max_tokens for its newer models;
    // local servers know max_tokens.
    let limit = if api.base_url == Provider::OpenAi.default_base_url() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    body[limit] = json!(api.max_tokens);
    body
}

/// The headers of every request (the key when there is one).
pub fn headers(key: Option<&str>) -> Vec<(&'static str, String)> {
    key.map(|k| ("authorization", format!("Bearer {k}")))
        .into_iter()
        .collect()
}

/// One kept message as Chat Completions messages.
fn translate(m: &Message) -> Vec<Value> {
    match m.role {
        Role::Assistant => {
            let text = m.text();
            let calls: Vec<Value> = m
                .tool_uses()
                .map(|(id, name, input)| {
                    json!({"id": id, "type": "function",
                           "function": {"name": name, "arguments": input.to_string()}})
                })
                .collect();
            let mut msg = json!({"role": "assistant",
                "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            vec![msg]
        }
        Role::User => {
            let mut out: Vec<Value> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => Some(json!({"role": "tool", "tool_call_id": tool_use_id,
                        "content": if *is_error { format!("Error: {content}") } else { content.clone() }})),
                    _ => None,
                })
                .collect();
            let text = m.text();
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
            out
        }
    }
}

/// A tool call being streamed.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The reader of one streamed reply.
#[derive(Debug, Default)]
pub struct Stream {
    text: String,
    calls: Vec<(u64, PartialCall)>,
    usage: Usage,
    model: Option<String>,
    finish: Option<String>,
    done: bool,
    chunks: u64,
}

impl Stream {
    pub fn new() -> Stream {
        Stream::default()
    }
}

impl StreamReader for Stream {
    fn event(&mut self, e: &Event, t: &mut Transcript) -> Result<(), CallError> {
        if e.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_str(&e.data).map_err(|err| {
            CallError::malformed(format!("a chunk that is not JSON ({err})"), &e.data)
        })?;
        if let Some(err) = v.get("error") {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| err.as_str())
                .unwrap_or("")
                .to_string();
            let kind = err
                .get("type")
                .or_else(|| err.get("code"))
                .and_then(Value::as_str);
            return Err(stream_error(kind, message, &e.data));
        }
        self.chunks += 1;
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            self.model = Some(m.to_string());
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = usage(u);
        }
        let Some(choice) = v.pointer("/choices/0") else {
            // The usage chunk has no choices.
            return Ok(());
        };
        if let Some(piece) = choice.pointer("/delta/content").and_then(Value::as_str) {
            self.text.push_str(piece);
            t.text(piece);
        }
        for call in choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let at = match self.calls.iter().position(|(i, _)| *i == index) {
                Some(p) => p,
                None => {
                    self.calls.push((index, PartialCall::default()));
                    self.calls.len() - 1
                }
            };
            let slot = &mut self.calls[at].1;
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.id.push_str(id);
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                slot.name.push_str(name);
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.arguments.push_str(args);
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_string());
            t.end_text();
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<Reply, CallError> {
        if self.chunks == 0 {
            return Err(CallError::malformed("the stream had no chunk", ""));
        }
        // Some servers end without [DONE]; a finish_reason says the reply is whole.
        if !self.done && self.finish.is_none() {
            return Err(CallError::provider(
                crate::signal::SignalKind::ProviderError,
                None,
                "the connection closed before the reply was complete",
            ));
        }
        let calls = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(_, c)| (c.id, c.name, c.arguments))
            .collect();
        Ok(assemble(
            std::mem::take(&mut self.text),
            calls,
            std::mem::take(&mut self.usage),
            self.model.take(),
            self.finish.take().unwrap_or_else(|| "stop".into()),
        ))
    }
}

/// The reply of a server that answered with one JSON completion.
pub fn whole(body: &str) -> Result<Reply, CallError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| CallError::malformed(format!("the reply is not JSON ({e})"), body))?;
    let choice = v
        .pointer("/choices/0")
        .ok_or_else(|| CallError::malformed("the reply has no choices", body))?;
    let msg = choice.get("message").unwrap_or(&Value::Null);
    let text = msg
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let calls = msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |p: &str| {
                c.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (s("/id"), s("/function/name"), s("/function/arguments"))
        })
        .collect();
    Ok(assemble(
        text,
        calls,
        v.get("usage").map(usage).unwrap_or_default(),
        v.get("model").and_then(Value::as_str).map(str::to_string),
        choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .unwrap_or("stop")
            .to_string(),
    ))
}

/// The assistant message of a reply; calls without an id get one (some
/// local servers give none) and arguments that are not a JSON object are
/// reported.
fn assemble(
    text: String,
    calls: Vec<(String, String, String)>,
    usage: Usage,
    model: Option<String>,
    stop: String,
) -> Reply {
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(Block::Text { text });
    }
    let mut invalid = Vec::new();
    for (n, (id, name, arguments)) in calls.into_iter().enumerate() {
        let id = if id.is_empty() {
            format!("call_{}", n + 1)
        } else {
            id
        };
        let parsed = if arguments.trim().is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_str::<Value>(&arguments)
        };
        let input = match parsed {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                invalid.push((id.clone(), arguments));
                json!({})
            }
        };
        content.push(Block::ToolUse { id, name, input });
    }
    Reply {
        message: Message {
            role: Role::Assistant,
            content,
        },
        usage,
        model,
        stop,
        invalid_inputs: invalid,
    }
}

/// `prompt_tokens` includes the cached ones; ours are counted apart.
fn usage(u: &Value) -> Usage {
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Usage {
        input_tokens: count(u, "prompt_tokens").saturating_sub(cached),
        output_tokens: count(u, "completion_tokens"),
        cached_input_tokens: cached,
        cost_usd: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(values: &[Value]) -> Vec<Event> {
        let mut out: Vec<Event> = values
            .iter()
            .map(|v| Event {
                name: String::new(),
                data: v.to_string(),
            })
            .collect();
        out.push(Event {
            name: String::new(),
            data: "[DONE]".into(),
        });
        out
    }

    fn read(evs: &[Event]) -> Result<Reply, CallError> {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(&log, "").unwrap();
        let mut t = Transcript::new(&log, cascade_process::LogLimit::default(), None);
        let mut s = Stream::new();
        for e in evs {
            s.event(e, &mut t)?;
        }
        s.finish()
    }

    #[test]
    fn streamed_tool_call_pieces_are_joined_by_index() {
        let evs = chunks(&[
            json!({"model": "qwen", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Writing"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "Write", "arguments": "{\"file_path\""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "RunGates", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": \"a.txt\", \"content\": \"x\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 20}}}),
        ]);
        let r = read(&evs).unwrap();
        assert_eq!(r.stop, "tool_calls");
        assert_eq!(r.model.as_deref(), Some("qwen"));
        assert_eq!(r.message.text(), "Writing");
        let calls: Vec<_> = r.message.tool_uses().collect();
        assert_eq!(
            calls[0],
            (
                "call_a",
                "Write",
                &json!({"file_path": "a.txt", "content": "x"})
            )
        );
        assert_eq!(calls[1], ("call_b", "RunGates", &json!({})));
        assert_eq!(
            (
                r.usage.input_tokens,
                r.usage.cached_input_tokens,
                r.usage.output_tokens
            ),
            (100, 20, 30)
        );
    }

    #[test]
    fn errors_in_the_stream_and_cut_streams() {
        let evs = vec![Event {
            name: String::new(),
            data:
                json!({"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}})
                    .to_string(),
        }];
        match read(&evs) {
            Err(CallError::Provider(s)) => {
                assert_eq!(s.kind, crate::signal::SignalKind::RateLimited)
            }
            other => panic!("{other:?}"),
        }
        let cut = vec![Event {
            name: String::new(),
            data: json!({"choices": [{"index": 0, "delta": {"content": "hal"}}]}).to_string(),
        }];
        assert!(read(&cut)
            .unwrap_err()
            .to_string()
            .contains("closed before"));
        let junk = vec![Event {
            name: String::new(),
            data: "not json".into(),
        }];
        assert!(read(&junk)
            .unwrap_err()
            .to_string()
            .contains("raw: \"not json\""));
    }

    #[test]
    fn conversation_is_translated_with_tool_messages() {
        let messages = vec![
            Message {
                role: Role::User,
                content: vec![Block::Text { text: "go".into() }],
            },
            Message {
                role: Role::Assistant,
                content: vec![Block::ToolUse {
                    id: "c1".into(),
                    name: "Read".into(),
                    input: json!({"file_path": "a"}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![
                    Block::ToolResult {
                        tool_use_id: "c1".into(),
                        content: "no such file".into(),
                        is_error: true,
                    },
                    Block::Text {
                        text: "retry".into(),
                    },
                ],
            },
        ];
        let api = ApiSettings {
            provider: Provider::OpenAi,
            model: "m".into(),
            base_url: "http://127.0.0.1:9".into(),
            api_key_env: None,
            max_tokens: 10,
            max_turns: 5,
            price: None,
        };
        let body = request(&api, "sys", &[], &messages);
        let m = body["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(m[1], json!({"role": "user", "content": "go"}));
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"file_path\":\"a\"}"
        );
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "Error: no such file"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "retry"}));
        assert_eq!(body["max_tokens"], 10);
        assert!(headers(None).is_empty());
    }

    #[test]
    fn a_whole_completion_is_read_and_ids_are_made_up_when_missing() {
        let body = json!({"model": "llama", "choices": [{"message": {"content": null,
            "tool_calls": [{"function": {"name": "Glob", "arguments": "{\"pattern\": \"*\"}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
        .to_string();
        let r = whole(&body).unwrap();
        let calls: Vec<_> = r.message.tool_uses().collect();
        assert_eq!(calls[0].0, "call_1");
        assert!(whole("[]").is_err());
    }
}
