//! A small mock of the OpenAI Responses API on 127.0.0.1 for the real
//! `codex` CLI, configured as a custom model provider in
//! `$CODEX_HOME/config.toml` (HTTP streaming; custom providers do not use
//! codex's WebSocket transport). The first turn answers with codex's code
//! mode `exec` tool calling `tools.apply_patch` to add a file; once the
//! request carries the tool output, a text answer. Modes answer every
//! request with 401 or 500 instead.

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;

use crate::mock_http::{read_request, respond, Listener};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Work,
    Unauthorized,
    ServerError,
}

/// The file the patch adds, and its content.
pub const WRITTEN_FILE: &str = "hello_from_codex.txt";
pub const WRITTEN_TEXT: &str = "written by the real codex CLI through the mock API\n";

pub struct MockApi {
    /// The base URL codex's provider config gets (`.../v1`).
    pub base_url: String,
    pub requests: Arc<AtomicUsize>,
    _server: Listener,
}

pub fn start(mode: Mode) -> MockApi {
    let server = Listener::start(move |conn, _stop, requests| {
        let _ = serve(conn, mode, requests);
    });
    MockApi {
        base_url: format!("http://{}/v1", server.addr),
        requests: Arc::clone(&server.requests),
        _server: server,
    }
}

fn serve(conn: TcpStream, mode: Mode, requests: &AtomicUsize) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    let Some(req) = read_request(&mut reader)? else {
        return Ok(());
    };
    if !(req.method == "POST" && req.path.ends_with("/responses")) {
        return respond(&mut out, 404, "application/json", &[], "{}");
    }
    requests.fetch_add(1, Ordering::SeqCst);
    let error = |message: &str, code: &str| {
        json!({"error": {"message": message, "type": "invalid_request_error", "code": code}})
            .to_string()
    };
    match mode {
        Mode::Unauthorized => respond(
            &mut out,
            401,
            "application/json",
            &[],
            &error("Incorrect API key provided: sk-test.", "invalid_api_key"),
        ),
        Mode::ServerError => respond(
            &mut out,
            500,
            "application/json",
            &[],
            &error(
                "The server had an error processing your request.",
                "server_error",
            ),
        ),
        Mode::Work => {
            let raw = String::from_utf8_lossy(&req.body);
            let item = if raw.contains("\"custom_tool_call_output\"")
                || raw.contains("\"function_call_output\"")
            {
                json!({"type": "message", "id": "msg_1", "role": "assistant",
                       "content": [{"type": "output_text", "text": "Done: the file is written."}]})
            } else {
                let patch = format!(
                    "*** Begin Patch\n*** Add File: {WRITTEN_FILE}\n+{}\n*** End Patch\n",
                    WRITTEN_TEXT.trim_end()
                );
                json!({"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "exec",
                       "input": format!("await tools.apply_patch({});\ntext('patched');", json!(patch))})
            };
            let events = [
                json!({"type": "response.created", "response": {"id": "resp_1"}}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                json!({"type": "response.completed", "response": {"id": "resp_1", "usage": {
                    "input_tokens": 900, "input_tokens_details": {"cached_tokens": 100},
                    "output_tokens": 60, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 960}}}),
            ];
            let body: String = events
                .iter()
                .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
                .collect();
            respond(&mut out, 200, "text/event-stream", &[], &body)
        }
    }
}
