//! A small mock of the Anthropic Messages API on 127.0.0.1 (random port),
//! enough for the real `claude` CLI to run one story: streamed server-sent
//! events (`message_start`, `content_block_*`, `message_delta`,
//! `message_stop`), a `Write` tool call on the first turn and a text answer
//! once the request carries the tool result. Modes answer every Messages
//! request with 401, 429 (with Retry-After), 500, or never (hang).
//!
//! HTTP through `mock_http` (plain std networking, no HTTP library).

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::mock_http::{read_request, respond, Listener};

/// How the mock answers `POST /v1/messages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A working model: Write tool call, then a text answer.
    Work,
    /// 401 authentication_error.
    Unauthorized,
    /// 429 rate_limit_error with `retry-after: 1`.
    RateLimited,
    /// 500 api_error.
    ServerError,
    /// Reads the request and never answers.
    Hang,
}

/// The file the `Write` tool call creates in the story's worktree.
pub const WRITTEN_FILE: &str = "hello_from_claude.txt";
pub const WRITTEN_TEXT: &str = "written by the real claude CLI through the mock API\n";

pub struct MockApi {
    pub url: String,
    /// Messages requests received.
    pub messages: Arc<AtomicUsize>,
    _server: Listener,
}

pub fn start(mode: Mode) -> MockApi {
    let server = Listener::start(move |conn, stop, messages| {
        let _ = serve(conn, mode, stop, messages);
    });
    MockApi {
        url: format!("http://{}", server.addr),
        messages: Arc::clone(&server.requests),
        _server: server,
    }
}

fn serve(
    conn: TcpStream,
    mode: Mode,
    stop: &AtomicBool,
    messages: &AtomicUsize,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    let Some(req) = read_request(&mut reader)? else {
        return Ok(());
    };
    let is_messages = req.method == "POST"
        && req.path.starts_with("/v1/messages")
        && !req.path.contains("count_tokens");
    if !is_messages {
        // Token counting, feature flags, anything else: a harmless answer.
        let body = if req.path.contains("count_tokens") {
            json!({"input_tokens": 100}).to_string()
        } else {
            "{}".to_string()
        };
        return respond(&mut out, 200, "application/json", &[], &body);
    }
    messages.fetch_add(1, Ordering::SeqCst);
    let error = |kind: &str, message: &str| {
        json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
    };
    match mode {
        Mode::Unauthorized => respond(
            &mut out,
            401,
            "application/json",
            &[],
            &error("authentication_error", "invalid x-api-key"),
        ),
        Mode::RateLimited => respond(
            &mut out,
            429,
            "application/json",
            &[("retry-after", "1")],
            &error(
                "rate_limit_error",
                "Number of requests has exceeded your rate limit",
            ),
        ),
        Mode::ServerError => respond(
            &mut out,
            500,
            "application/json",
            &[],
            &error("api_error", "Internal server error"),
        ),
        Mode::Hang => {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        }
        Mode::Work => {
            let request: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            let reply = answer(&request, &String::from_utf8_lossy(&req.body));
            if request.get("stream").and_then(Value::as_bool) == Some(true) {
                respond(&mut out, 200, "text/event-stream", &[], &sse(&reply))
            } else {
                respond(&mut out, 200, "application/json", &[], &reply.to_string())
            }
        }
    }
}

/// The assistant message for a request: a Write call on a coding turn, a
/// text answer once the tool result is there (and for side requests, such
/// as title generation, that offer no tools).
fn answer(request: &Value, raw: &str) -> Value {
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-sonnet-4-5")
        .to_string();
    let offers_write = request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.get("name").and_then(Value::as_str) == Some("Write"))
        });
    let has_result = raw.contains("\"tool_result\"");
    let usage = json!({"input_tokens": 1200, "output_tokens": 80, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0});
    let content = if offers_write && !has_result {
        let dir = working_directory(raw).unwrap_or_default();
        let path = if dir.is_empty() {
            WRITTEN_FILE.to_string()
        } else {
            format!("{dir}/{WRITTEN_FILE}")
        };
        json!([{"type": "tool_use", "id": "toolu_mock_1", "name": "Write",
                "input": {"file_path": path, "content": WRITTEN_TEXT}}])
    } else {
        json!([{"type": "text", "text": "Done: the file is written."}])
    };
    let stop = if content[0]["type"] == "tool_use" {
        "tool_use"
    } else {
        "end_turn"
    };
    json!({"id": "msg_mock", "type": "message", "role": "assistant", "model": model,
           "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
}

/// Claude Code's system prompt names the session's directory.
fn working_directory(raw: &str) -> Option<String> {
    let marker = "Primary working directory: ";
    let start = raw.find(marker)? + marker.len();
    let path: String = raw[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '\\' && *c != '"')
        .collect();
    (!path.is_empty()).then_some(path)
}

/// The message as the Messages API streams it.
pub fn sse(message: &Value) -> String {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": start}),
    )];
    for (i, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        match block["type"].as_str() {
            Some("tool_use") => {
                let mut empty = block.clone();
                empty["input"] = json!({});
                events.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": empty}),
                ));
                events.push(("content_block_delta", json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}})));
            }
            _ => {
                events.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}}),
                ));
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": block["text"]}}),
                ));
            }
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
        "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
        .into_iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}
