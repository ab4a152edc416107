//! Parsing agents' stdout as it streams: Claude's `stream-json` events (also
//! spoken by amp and cursor-agent), Codex's `exec --json` events (current
//! `thread.started` / `item.completed` / `turn.completed` and the older
//! `{"msg": {...}}` envelope), and plain text.
//!
//! The parser is fed one line at a time (from `Spec::on_stdout_line`) and
//! keeps only small state: the session id, usage, the last assistant text
//! (bounded) and the review verdict, so an agent printing gigabytes never has
//! its output held in memory. Lines that are not JSON objects are treated as
//! plain assistant text, which is how review markers of text-only agents
//! (aider, gemini) are found.

use serde::Serialize;
use serde_json::Value;

/// At most this many bytes of the final text are kept.
pub const MAX_FINAL_TEXT: usize = 64 * 1024;

/// Token usage and cost reported by an agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens served from (or written to) the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Cost in US dollars, when the agent reports it (Claude does).
    pub cost_usd: Option<f64>,
}

/// The verdict of a review, from `<review>PASS</review>` or
/// `<review>NEEDS_REVISION</review>` in the assistant's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReviewVerdict {
    Pass,
    NeedsRevision,
}

/// What was learned from one agent's stdout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamSummary {
    /// The final answer: Claude's `result`, else the last assistant message.
    pub final_text: Option<String>,
    /// Claude's `session_id` or Codex's thread/session id.
    pub session_id: Option<String>,
    /// The model the agent reported (`model` of an event or its message).
    pub model: Option<String>,
    pub usage: Option<Usage>,
    /// The last review marker seen.
    pub review: Option<ReviewVerdict>,
    /// Claude's result said `is_error: true`, or Codex reported a failed turn.
    pub reported_error: Option<String>,
    /// How many lines were JSON events.
    pub json_events: u64,
}

/// Incremental parser of an agent's stdout.
#[derive(Debug, Default)]
pub struct StreamParser {
    summary: StreamSummary,
    /// The last assistant message (Claude/Codex) when no final result came.
    last_message: Option<String>,
    review: ReviewScanner,
    /// A gemini assistant message is being streamed in deltas.
    gemini_open: bool,
}

impl StreamParser {
    pub fn new() -> StreamParser {
        StreamParser::default()
    }

    /// Feeds one line (without its newline). Invalid UTF-8 is replaced.
    pub fn feed_line(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let trimmed = text.trim();
        if trimmed.starts_with('{') {
            if let Ok(Value::Object(event)) = serde_json::from_str::<Value>(trimmed) {
                self.summary.json_events += 1;
                self.event(&Value::Object(event));
                return;
            }
        }
        self.review.feed(&text);
        self.review.feed("\n");
    }

    /// Everything found so far.
    pub fn summary(&self) -> StreamSummary {
        let mut s = self.summary.clone();
        if s.final_text.is_none() {
            s.final_text = self.last_message.clone();
        }
        s.review = self.review.verdict();
        s
    }

    fn event(&mut self, event: &Value) {
        if let Some(id) = event.get("session_id").and_then(Value::as_str) {
            self.summary.session_id = Some(id.to_string());
        }
        if let Some(model) = event
            .get("model")
            .or_else(|| event.get("message").and_then(|m| m.get("model")))
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            self.summary.model = Some(model.to_string());
        }
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "message" {
            self.gemini_open = false;
        }
        match kind {
            // Claude / amp / cursor-agent stream-json.
            "assistant" => {
                let text = assistant_text(event);
                if !text.is_empty() {
                    self.assistant_text(&text);
                }
            }
            "result" if event.get("stats").is_some() => self.gemini_result(event),
            "result" => self.claude_result(event),
            // Gemini stream-json: assistant text arrives in deltas.
            "message" => {
                if event.get("role").and_then(Value::as_str) == Some("assistant") {
                    if let Some(text) = event.get("content").and_then(Value::as_str) {
                        if event.get("delta").and_then(Value::as_bool) == Some(true) {
                            self.gemini_delta(text);
                        } else {
                            self.assistant_text(text);
                        }
                    }
                }
            }
            // Codex exec --json (current).
            "thread.started" => {
                if let Some(id) = event.get("thread_id").and_then(Value::as_str) {
                    self.summary.session_id = Some(id.to_string());
                }
            }
            "item.completed" => {
                if let Some(item) = event.get("item") {
                    let item_type = item
                        .get("type")
                        .or_else(|| item.get("item_type"))
                        .and_then(Value::as_str);
                    if item_type == Some("agent_message") || item_type == Some("assistant_message")
                    {
                        if let Some(text) = item.get("text").and_then(Value::as_str) {
                            self.assistant_text(text);
                        }
                    }
                }
            }
            "turn.completed" => {
                if let Some(u) = event.get("usage") {
                    self.add_usage(u);
                }
            }
            "turn.failed" | "error" => {
                let message = event
                    .get("error")
                    .and_then(|e| e.get("message").or(Some(e)))
                    .or_else(|| event.get("message"))
                    .map(value_text)
                    .unwrap_or_else(|| kind.to_string());
                self.summary.reported_error = Some(message);
            }
            _ => {
                // Codex exec --json (older releases): {"id": "..", "msg": {...}}.
                if let Some(msg) = event.get("msg") {
                    self.codex_legacy(msg);
                }
            }
        }
    }

    fn assistant_text(&mut self, text: &str) {
        self.review.feed(text);
        self.review.feed("\n");
        self.last_message = Some(bounded(text));
    }

    /// Gemini streams its answer in pieces; they make one message until a
    /// non-assistant event (a tool call) ends it.
    fn gemini_delta(&mut self, text: &str) {
        self.review.feed(text);
        let mut message = self.last_message.take().unwrap_or_default();
        if !self.gemini_open {
            message.clear();
        }
        message.push_str(text);
        self.last_message = Some(bounded(&message));
        self.gemini_open = true;
    }

    /// Gemini's final `result`: `status`, `error`, and `stats` with token
    /// counts (`input_tokens` counts the prompt including its cached part;
    /// `input` is the uncached part). Gemini reports no cost.
    fn gemini_result(&mut self, event: &Value) {
        if event.get("status").and_then(Value::as_str) == Some("error") {
            let message = event
                .get("error")
                .and_then(|e| e.get("message"))
                .map(value_text)
                .unwrap_or_else(|| "error".to_string());
            self.summary.reported_error = Some(message);
        }
        if let Some(stats) = event.get("stats") {
            let n = |k: &str| stats.get(k).and_then(Value::as_u64);
            let cached = n("cached").unwrap_or(0);
            let input =
                n("input").unwrap_or_else(|| n("input_tokens").unwrap_or(0).saturating_sub(cached));
            self.summary.usage = Some(Usage {
                input_tokens: input,
                output_tokens: n("output_tokens").unwrap_or(0),
                cached_input_tokens: cached,
                cost_usd: None,
            });
        }
    }

    fn claude_result(&mut self, event: &Value) {
        if let Some(text) = event.get("result").and_then(Value::as_str) {
            self.review.feed(text);
            self.review.feed("\n");
            self.summary.final_text = Some(bounded(text));
        }
        if event.get("is_error").and_then(Value::as_bool) == Some(true) {
            let subtype = event
                .get("subtype")
                .and_then(Value::as_str)
                .unwrap_or("error");
            self.summary.reported_error = Some(subtype.to_string());
        }
        // The result's usage is the run's total: it replaces anything summed.
        let mut usage = Usage::default();
        if let Some(u) = event.get("usage") {
            usage = usage_from(u);
        }
        usage.cost_usd = event
            .get("total_cost_usd")
            .or_else(|| event.get("cost_usd"))
            .and_then(Value::as_f64);
        if event.get("usage").is_some() || usage.cost_usd.is_some() {
            self.summary.usage = Some(usage);
        }
    }

    fn codex_legacy(&mut self, msg: &Value) {
        match msg.get("type").and_then(Value::as_str).unwrap_or("") {
            "session_configured" => {
                if let Some(id) = msg.get("session_id").and_then(Value::as_str) {
                    self.summary.session_id = Some(id.to_string());
                }
            }
            "agent_message" => {
                if let Some(text) = msg.get("message").and_then(Value::as_str) {
                    self.assistant_text(text);
                }
            }
            "task_complete" => {
                if let Some(text) = msg.get("last_agent_message").and_then(Value::as_str) {
                    self.review.feed(text);
                    self.summary.final_text = Some(bounded(text));
                }
            }
            "token_count" => {
                // Either flat counts or {"info": {"total_token_usage": {...}}};
                // both are running totals, so they replace earlier values.
                let totals = msg
                    .get("info")
                    .and_then(|i| i.get("total_token_usage"))
                    .unwrap_or(msg);
                if totals.get("input_tokens").is_some() || totals.get("output_tokens").is_some() {
                    self.summary.usage = Some(usage_from(totals));
                }
            }
            "error" => {
                self.summary.reported_error = msg.get("message").map(value_text);
            }
            _ => {}
        }
    }

    /// Codex reports usage per turn: turns add up.
    fn add_usage(&mut self, u: &Value) {
        let add = usage_from(u);
        let total = self.summary.usage.get_or_insert_with(Usage::default);
        total.input_tokens += add.input_tokens;
        total.output_tokens += add.output_tokens;
        total.cached_input_tokens += add.cached_input_tokens;
    }
}

fn usage_from(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cached_input_tokens: n("cached_input_tokens")
            + n("cache_read_input_tokens")
            + n("cache_creation_input_tokens"),
        cost_usd: None,
    }
}

/// The text blocks of a Claude assistant event, joined by newlines
/// (tool calls and thinking are not the agent's answer).
pub(crate) fn assistant_text(event: &Value) -> String {
    let content = event
        .get("message")
        .and_then(|m| m.get("content"))
        .or_else(|| event.get("content"));
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The last [`MAX_FINAL_TEXT`] bytes of `text`, cut on a character boundary.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_FINAL_TEXT {
        return text.to_string();
    }
    let mut start = text.len() - MAX_FINAL_TEXT;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// Finds `<review>VERDICT</review>` markers in text that arrives in pieces.
///
/// Accepts whitespace and newlines inside the tags, any letter case,
/// `NEEDS REVISION` / `NEEDS-REVISION`, and HTML-escaped tags
/// (`&lt;review&gt;`). JSON escapes (`\u003c`, `\n`) are already decoded by the
/// JSON parser before the text gets here. Only a bounded tail of text is kept
/// between pieces, enough to hold one marker split across lines.
#[derive(Debug, Default)]
pub struct ReviewScanner {
    carry: String,
    verdict: Option<ReviewVerdict>,
}

/// A marker longer than this (tags, spaces and verdict) is not a marker.
const MAX_MARKER: usize = 256;
/// Bytes kept between pieces when no marker is open (longer than `&lt;review&gt;`).
const KEEP_TAIL: usize = 24;

impl ReviewScanner {
    pub fn new() -> ReviewScanner {
        ReviewScanner::default()
    }

    /// Adds text; the last complete marker so far wins.
    pub fn feed(&mut self, text: &str) {
        self.carry.push_str(text);
        let normalized = normalize(&self.carry);
        let mut pos = 0;
        let mut pending = None;
        while let Some(found) = normalized[pos..].find("<review>") {
            let body_start = pos + found + "<review>".len();
            match normalized[body_start..].find("</review>") {
                Some(close) => {
                    if let Some(v) = parse_verdict(&normalized[body_start..body_start + close]) {
                        self.verdict = Some(v);
                    }
                    pos = body_start + close + "</review>".len();
                }
                None => {
                    pending = Some(pos + found);
                    break;
                }
            }
        }
        let keep_from = match pending {
            // An open marker waits for its closing tag (if still plausible).
            Some(open) if normalized.len() - open <= MAX_MARKER => open,
            // Otherwise keep a short tail that could hold the start of a tag.
            _ => pos.max(normalized.len().saturating_sub(KEEP_TAIL)),
        };
        self.carry = char_boundary_tail(&normalized, keep_from).to_string();
    }

    /// The last verdict seen.
    pub fn verdict(&self) -> Option<ReviewVerdict> {
        self.verdict
    }
}

/// Lower-cases ASCII, decodes `&lt;`/`&gt;` and removes whitespace inside
/// tags, so `< Review >` and `&lt;review&gt;` both read `<review>`.
fn normalize(text: &str) -> String {
    let decoded = text.replace("&lt;", "<").replace("&gt;", ">");
    let mut out = String::with_capacity(decoded.len());
    let mut in_tag = false;
    for c in decoded.chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(c);
            }
            '>' => {
                in_tag = false;
                out.push(c);
            }
            c if in_tag && c.is_whitespace() => {}
            c => out.push(c.to_ascii_lowercase()),
        }
    }
    out
}

fn parse_verdict(body: &str) -> Option<ReviewVerdict> {
    let words: String = body.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    match words.as_str() {
        "pass" | "passed" | "approved" => Some(ReviewVerdict::Pass),
        "needsrevision" | "needsrevisions" => Some(ReviewVerdict::NeedsRevision),
        _ => None,
    }
}

fn char_boundary_tail(s: &str, mut from: usize) -> &str {
    from = from.min(s.len());
    while !s.is_char_boundary(from) {
        from += 1;
    }
    &s[from..]
}

#[cfg(test)]
mod tests;
