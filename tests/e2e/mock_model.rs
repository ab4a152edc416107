//! A scripted model behind a mock Messages API (Anthropic) or Chat
//! Completions API (OpenAI) on 127.0.0.1, for cascade's own api agent.
//!
//! The model is a pure function of the conversation it is sent ([`next`]):
//! it reads the step from the latest prompt (a planning step's header, or a
//! story's `# Story <id>:`), takes the paths from the prompt's text and the
//! working directory from the system prompt's `Primary working directory:`
//! line, and answers with tool calls (`Write`, `Read`, `RunGates`) until the
//! results it got back say the step is done, then with text. Every request
//! body is recorded for the tests to read. Modes answer with 401, a 429
//! once, 500, 529, nothing at all, or a stream that is not JSON; `Escape`
//! tries the three path escapes before doing the story; `Chatty` streams
//! megabytes of text before its answer; `EmptyFinal` is `Retry` whose
//! every text answer is empty (`content: []`, as the live API sometimes
//! ends a turn after tool use). Like the real Messages API, a request
//! holding a message with empty content is refused with 400.
//!
//! Replies are streamed as the real APIs stream them (Anthropic's events
//! through `mock_anthropic::sse`; OpenAI chunks with the tool call's
//! arguments split in two), over `mock_http`.

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::mock_http::{read_request, respond, Listener};

/// The key the mock accepts.
pub const KEY: &str = "sk-test-key";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The scripted model.
    Work,
    /// The first story attempt skips RunGates and writes a draft; a
    /// continued conversation writes the fix.
    Retry,
    /// Tries `../../etc/passwd`, a path under the given outside directory
    /// and the worktree's `escape` symlink first.
    Escape(String),
    /// 401 on every request.
    Unauthorized,
    /// 429 with `retry-after: 1` on the first request, then `Work`.
    RateLimitedOnce,
    /// 500 on every request.
    ServerError,
    /// 529 overloaded on every request.
    Overloaded,
    /// Reads the request and never answers.
    Hang,
    /// 200 with a stream that is not JSON.
    Malformed,
    /// `Work`, with about this many bytes of chatter (whole short lines)
    /// streamed before the final answer of a story.
    Chatty(usize),
    /// `Retry`, every text answer empty.
    EmptyFinal,
}

pub struct Model {
    /// The agent's `base_url`.
    pub url: String,
    /// The body of every model request, in order.
    pub requests: Arc<Mutex<Vec<Value>>>,
    _server: Listener,
}

impl Model {
    /// The recorded request bodies.
    pub fn bodies(&self) -> Vec<Value> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Every tool result the model was sent (content, is_error), in order,
    /// de-duplicated (later requests resend earlier results).
    pub fn tool_results(&self, wire: Wire) -> Vec<(String, bool)> {
        let mut out: Vec<(String, String, bool)> = Vec::new();
        for body in self.bodies() {
            for m in conversation(&body, wire).messages {
                for item in m.items {
                    if let Item::Result { id, content, error } = item {
                        if !out.iter().any(|(i, _, _)| *i == id) {
                            out.push((id, content, error));
                        }
                    }
                }
            }
        }
        out.into_iter().map(|(_, c, e)| (c, e)).collect()
    }
}

pub fn start(wire: Wire, mode: Mode) -> Model {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&requests);
    let server = Listener::start(move |conn, stop, count| {
        let _ = serve(conn, wire, &mode, stop, count, &recorded);
    });
    Model {
        url: format!("http://{}", server.addr),
        requests,
        _server: server,
    }
}

fn serve(
    conn: TcpStream,
    wire: Wire,
    mode: &Mode,
    stop: &AtomicBool,
    count: &AtomicUsize,
    recorded: &Mutex<Vec<Value>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    let Some(req) = read_request(&mut reader)? else {
        return Ok(());
    };
    let endpoint = match wire {
        Wire::Anthropic => "/v1/messages",
        Wire::OpenAi => "/v1/chat/completions",
    };
    let is_model_call = req.method == "POST" && req.path == endpoint;
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    if is_model_call {
        if let Ok(mut r) = recorded.lock() {
            r.push(body.clone());
        }
    }
    let authorized = match wire {
        Wire::Anthropic => req.header("x-api-key") == Some(KEY),
        Wire::OpenAi => req.header("authorization") == Some(&format!("Bearer {KEY}")),
    };
    let error = |kind: &str, message: &str| {
        json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
    };
    if !authorized || *mode == Mode::Unauthorized {
        return respond(
            &mut out,
            401,
            "application/json",
            &[],
            &error("authentication_error", "invalid x-api-key"),
        );
    }
    if req.method == "GET" && req.path.ends_with("/models") {
        let body = json!({"data": [{"id": "mock-model"}]}).to_string();
        return respond(&mut out, 200, "application/json", &[], &body);
    }
    if !is_model_call {
        return respond(&mut out, 404, "application/json", &[], "{}");
    }
    if let Some(i) = empty_message(&body, wire) {
        return respond(
            &mut out,
            400,
            "application/json",
            &[],
            &error(
                "invalid_request_error",
                &format!("messages.{i}: all messages must have non-empty content except for the optional final assistant message"),
            ),
        );
    }
    let n = count.fetch_add(1, Ordering::SeqCst);
    match mode {
        Mode::RateLimitedOnce if n == 0 => respond(
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
        Mode::Overloaded => respond(
            &mut out,
            529,
            "application/json",
            &[],
            &error("overloaded_error", "Overloaded"),
        ),
        Mode::Hang => {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        }
        Mode::Malformed => respond(
            &mut out,
            200,
            "text/event-stream",
            &[],
            "event: message_start\ndata: <html>upstream garbage</html>\n\n",
        ),
        _ => {
            let mut reply = next(&conversation(&body, wire), mode);
            if let (Mode::Chatty(n), Reply::Text(text)) = (mode, &mut reply) {
                let line = "the model goes on and on about the story\n";
                *text = format!("{}{text}", line.repeat(n / line.len()));
            }
            if let (Mode::EmptyFinal, Reply::Text(_)) = (mode, &reply) {
                reply = Reply::Empty;
            }
            let model = body["model"].as_str().unwrap_or("mock-model");
            respond(
                &mut out,
                200,
                "text/event-stream",
                &[],
                &render(&reply, wire, model),
            )
        }
    }
}

/// One piece of a message, whichever API carried it.
#[derive(Debug, Clone)]
pub enum Item {
    Text(String),
    /// A tool call (the script only counts their results).
    Call,
    Result {
        id: String,
        content: String,
        error: bool,
    },
}

pub struct Msg {
    pub role: String,
    pub items: Vec<Item>,
}

pub struct Conversation {
    pub system: String,
    pub messages: Vec<Msg>,
}

/// A request body as one conversation.
pub fn conversation(body: &Value, wire: Wire) -> Conversation {
    let list = body["messages"].as_array().cloned().unwrap_or_default();
    let mut system = body["system"].as_str().unwrap_or("").to_string();
    let mut messages: Vec<Msg> = Vec::new();
    for m in list {
        let role = m["role"].as_str().unwrap_or("").to_string();
        let mut items = Vec::new();
        match (wire, role.as_str()) {
            (Wire::OpenAi, "system") => {
                system = m["content"].as_str().unwrap_or("").to_string();
                continue;
            }
            (Wire::OpenAi, "tool") => {
                let content = m["content"].as_str().unwrap_or("").to_string();
                items.push(Item::Result {
                    id: m["tool_call_id"].as_str().unwrap_or("").to_string(),
                    error: content.starts_with("Error: "),
                    content,
                });
                messages.push(Msg {
                    role: "user".into(),
                    items,
                });
                continue;
            }
            (Wire::OpenAi, _) => {
                if let Some(t) = m["content"].as_str() {
                    items.push(Item::Text(t.to_string()));
                }
                for _ in m["tool_calls"].as_array().into_iter().flatten() {
                    items.push(Item::Call);
                }
            }
            (Wire::Anthropic, _) => {
                for b in m["content"].as_array().into_iter().flatten() {
                    items.push(match b["type"].as_str() {
                        Some("tool_use") => Item::Call,
                        Some("tool_result") => Item::Result {
                            id: b["tool_use_id"].as_str().unwrap_or("").to_string(),
                            content: b["content"].as_str().unwrap_or("").to_string(),
                            error: b["is_error"].as_bool() == Some(true),
                        },
                        _ => Item::Text(b["text"].as_str().unwrap_or("").to_string()),
                    });
                }
            }
        }
        messages.push(Msg { role, items });
    }
    Conversation { system, messages }
}

/// The index of the first message with empty content the Messages API
/// would refuse (Anthropic wire only: the live refusal the mock copies).
fn empty_message(body: &Value, wire: Wire) -> Option<usize> {
    if wire != Wire::Anthropic {
        return None;
    }
    body["messages"].as_array()?.iter().position(|m| {
        m["content"].as_array().is_some_and(|blocks| {
            blocks.is_empty()
                || blocks.iter().all(|b| {
                    b["type"] == "text" && b["text"].as_str().is_some_and(|t| t.trim().is_empty())
                })
        })
    })
}

/// What the model says next.
pub enum Reply {
    Text(String),
    Calls(Vec<(&'static str, Value)>),
    /// No content at all, ending the turn.
    Empty,
}

/// The scripted model (see the module doc).
pub fn next(c: &Conversation, mode: &Mode) -> Reply {
    // The latest prompt, and the tool results that came after it (a prompt
    // may share its message with the results of the turn before it).
    let prompts: Vec<((usize, usize), &str)> = c
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == "user")
        .flat_map(|(i, m)| {
            m.items
                .iter()
                .enumerate()
                .filter_map(move |(j, it)| match it {
                    Item::Text(t) if !t.is_empty() => Some(((i, j), t.as_str())),
                    _ => None,
                })
        })
        .collect();
    let Some(&(at, prompt)) = prompts.last() else {
        return Reply::Text("no prompt".into());
    };
    let results: Vec<&str> = c
        .messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| m.items.iter().enumerate().map(move |(j, it)| ((i, j), it)))
        .filter(|(pos, _)| *pos > at)
        .filter_map(|(_, it)| match it {
            Item::Result { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let stage = results.len();
    let workdir = after(&c.system, "Primary working directory: ").unwrap_or_default();
    if let Some(id) = prompt
        .strip_prefix("# Story ")
        .and_then(|r| r.split(':').next())
    {
        let continued = prompts
            .iter()
            .filter(|(_, p)| p.starts_with("# Story "))
            .count()
            > 1;
        return story(id, &workdir, &results, continued, mode);
    }
    let step = prompt
        .strip_prefix("# cascade planning: ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or("");
    planning(step, prompt, stage)
}

fn story(id: &str, workdir: &str, results: &[&str], continued: bool, mode: &Mode) -> Reply {
    let file = format!("{workdir}/{id}.txt");
    if let (Mode::Escape(outside), true) = (mode, results.is_empty()) {
        return Reply::Calls(vec![
            ("Read", json!({"file_path": "../../etc/passwd"})),
            (
                "Write",
                json!({"file_path": format!("{outside}/pwned.txt"), "content": "pwned"}),
            ),
            (
                "Write",
                json!({"file_path": "escape/pwned.txt", "content": "pwned"}),
            ),
            ("Read", json!({"file_path": "escape/secret.txt"})),
        ]);
    }
    let wrote = results.iter().filter(|r| r.starts_with("wrote ")).count();
    let gate_runs = results.iter().filter(|r| is_gate_report(r)).count();
    let last = results.last().copied().unwrap_or("");
    // Retry mode: the first attempt leaves a draft without running the
    // gates; the retry, continuing the conversation, fixes it.
    if matches!(mode, Mode::Retry | Mode::EmptyFinal) && !continued {
        return match wrote {
            0 => write(&file, &format!("{id} draft\n")),
            _ => Reply::Text(format!("{id}: wrote a draft")),
        };
    }
    if wrote == 0 {
        let first = if continued { "fixed" } else { "draft" };
        return write(&file, &format!("{id} {first}\n"));
    }
    if gate_runs < wrote {
        return Reply::Calls(vec![("RunGates", json!({}))]);
    }
    if last.contains("failed") {
        return write(&file, &format!("{id} fixed\n"));
    }
    Reply::Text(format!("{id}: done, the gates pass"))
}

fn write(path: &str, content: &str) -> Reply {
    Reply::Calls(vec![(
        "Write",
        json!({"file_path": path, "content": content}),
    )])
}

/// What RunGates answers (cascade-gates' summary for prompts).
fn is_gate_report(r: &str) -> bool {
    r.starts_with("All quality gates passed") || r.starts_with("- gate '")
}

/// A planning step: write its files, then say it is done.
fn planning(step: &str, prompt: &str, stage: usize) -> Reply {
    let output = backticked_before(prompt, " (also `CASCADE_OUTPUT`)");
    if stage > 0 {
        return Reply::Text(match step {
            "self-review" => "Checked the plan against the goal. <review>PASS</review>".into(),
            _ => format!("{step}: written"),
        });
    }
    let out = |content: Value| -> Reply {
        let text = match content {
            Value::String(s) => s,
            v => v.to_string(),
        };
        Reply::Calls(vec![(
            "Write",
            json!({"file_path": output.clone().unwrap_or_default(), "content": text}),
        )])
    };
    match step {
        "strategy" => out(json!({
            "task_analysis": {"functional_areas": ["greeting"], "estimated_stories": 2},
            "strategy_decision": {"strategy": "HYBRID_AUTO", "confidence": 0.9, "reasoning": "two small stories"}})),
        "discovery" => out(json!({"questions": [{"id": "q-1", "type": "scope",
            "question": "Which languages?", "context": "decides the stories",
            "options": ["English", "French"], "assumption": "English only"}]})),
        "design" => out(
            json!({"decisions": [{"id": "d-1", "topic": "Where greetings live",
            "context": "one file per story", "options": [
                {"id": "opt-a", "name": "Text files", "description": "plain files",
                 "tradeoffs": {"pros": ["simple"], "cons": ["none"]}}],
            "recommendation": "opt-a"}], "summary": "plain text files"}),
        ),
        "generate" | "fix" | "revise" => {
            let prd = backticked_before(prompt, " (also `CASCADE_PRD_PATH`)").unwrap_or_default();
            let doc =
                backticked_before(prompt, " (also `CASCADE_DESIGN_DOC_PATH`)").unwrap_or_default();
            let plan = json!({"goal": "greet", "objectives": ["greet"], "stories": [
                {"id": "story-001", "title": "Hello file", "description": "write the hello file",
                 "priority": "high", "dependencies": [], "status": "pending",
                 "acceptance_criteria": ["the file exists"]},
                {"id": "story-002", "title": "Bye file", "description": "write the bye file",
                 "priority": "medium", "dependencies": ["story-001"], "status": "pending",
                 "acceptance_criteria": ["the file exists"]}]});
            let design = json!({"metadata": {"source": "ai-generated"}, "overview": {"title": "Greetings"},
                "architecture": {"components": [{"name": "Files"}], "patterns": []},
                "decisions": [{"id": "ADR-001", "title": "Text files", "decision": "plain files"}],
                "story_mappings": {"story-001": {"components": ["Files"]}, "story-002": {"components": ["Files"]}}});
            Reply::Calls(vec![
                (
                    "Write",
                    json!({"file_path": prd, "content": plan.to_string()}),
                ),
                (
                    "Write",
                    json!({"file_path": doc, "content": design.to_string()}),
                ),
            ])
        }
        "self-review" => {
            let prd = after(prompt, "Review the plan you just wrote (`")
                .and_then(|r| r.split('`').next().map(str::to_string))
                .unwrap_or_default();
            Reply::Calls(vec![("Read", json!({"file_path": prd}))])
        }
        "challenge" => {
            let verdict = if prompt.contains("(challenge round 1)") {
                "NEEDS_REVISION"
            } else {
                "APPROVED"
            };
            out(Value::String(format!(
                "# Challenge\n\n- story-002 should name the file\n\nVerdict: {verdict}\n"
            )))
        }
        other => Reply::Text(format!("unknown step '{other}'")),
    }
}

/// The rest of the line after `marker`.
fn after(text: &str, marker: &str) -> Option<String> {
    let start = text.find(marker)? + marker.len();
    Some(text[start..].lines().next().unwrap_or("").to_string())
}

/// The backtick-quoted text that ends right before `marker`.
fn backticked_before(text: &str, marker: &str) -> Option<String> {
    let end = text.find(marker)?;
    let before = text[..end].strip_suffix('`')?;
    let start = before.rfind('`')? + 1;
    Some(before[start..].to_string())
}

/// The reply as the API streams it.
fn render(reply: &Reply, wire: Wire, model: &str) -> String {
    let usage = json!({"input_tokens": 1000, "output_tokens": 50,
        "cache_read_input_tokens": 200, "cache_creation_input_tokens": 0});
    match wire {
        Wire::Anthropic => {
            let (content, stop) = match reply {
                Reply::Text(t) => (json!([{"type": "text", "text": t}]), "end_turn"),
                Reply::Empty => (json!([]), "end_turn"),
                Reply::Calls(calls) => (
                    Value::Array(
                        calls
                            .iter()
                            .enumerate()
                            .map(|(i, (name, input))| {
                                json!({"type": "tool_use", "id": format!("toolu_{}_{i}", unique()),
                                       "name": name, "input": input})
                            })
                            .collect(),
                    ),
                    "tool_use",
                ),
            };
            crate::mock_anthropic::sse(&json!({"id": "msg_mock", "type": "message",
                "role": "assistant", "model": model, "content": content,
                "stop_reason": stop, "stop_sequence": null, "usage": usage}))
        }
        Wire::OpenAi => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            let mut chunks = vec![chunk(json!({"role": "assistant"}), Value::Null)];
            let finish = match reply {
                Reply::Text(t) => {
                    // The text in two pieces, as a model streams it.
                    let mid = t
                        .char_indices()
                        .nth(t.chars().count() / 2)
                        .map_or(0, |(i, _)| i);
                    chunks.push(chunk(json!({"content": &t[..mid]}), Value::Null));
                    chunks.push(chunk(json!({"content": &t[mid..]}), Value::Null));
                    "stop"
                }
                Reply::Empty => "stop",
                Reply::Calls(calls) => {
                    for (i, (name, input)) in calls.iter().enumerate() {
                        let args = input.to_string();
                        let mid = args.len() / 2;
                        let mid = (mid..args.len())
                            .find(|m| args.is_char_boundary(*m))
                            .unwrap_or(0);
                        chunks.push(chunk(
                            json!({"tool_calls": [{"index": i,
                            "id": format!("call_{}_{i}", unique()), "type": "function",
                            "function": {"name": name, "arguments": &args[..mid]}}]}),
                            Value::Null,
                        ));
                        chunks.push(chunk(
                            json!({"tool_calls": [{"index": i,
                            "function": {"arguments": &args[mid..]}}]}),
                            Value::Null,
                        ));
                    }
                    "tool_calls"
                }
            };
            chunks.push(chunk(json!({}), json!(finish)));
            chunks.push(
                json!({"id": "chatcmpl-mock", "choices": [], "usage": {"prompt_tokens": 1200,
                "completion_tokens": 50, "prompt_tokens_details": {"cached_tokens": 200}}}),
            );
            let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
            body.push_str("data: [DONE]\n\n");
            body
        }
    }
}

/// A number no other reply of this process used (tool call ids must differ).
fn unique() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}
