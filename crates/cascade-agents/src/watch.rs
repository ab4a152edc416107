//! The live stream watcher: reads an agent's output as it arrives and
//! classifies provider trouble into a [`FailureSignal`] (auth, rate limit,
//! provider error), deciding when the agent should be stopped.
//!
//! Sources, per shipped CLI:
//! - Claude Code (also amp and cursor-agent, which speak its stream-json):
//!   `{"type":"system","subtype":"api_retry","attempt":N,"max_retries":10,
//!   "retry_delay_ms":..,"error_status":401,"error":"authentication_failed"}`
//!   (`error` is one of authentication_failed, rate_limit, overloaded,
//!   server_error, unknown), assistant events carrying an `error` field
//!   (the synthetic "Not logged in · Please run /login" answer), and a final
//!   `result` with `is_error` and `api_error_status`.
//! - Codex `exec --json`: `{"type":"error","message":"Reconnecting... 2/5
//!   (...)"}` for every internal retry, `turn.failed` and `error` items,
//!   whose messages carry the HTTP status in words ("unexpected status 401
//!   Unauthorized", "exceeded retry limit, last status: 429 Too Many Requests").
//! - Gemini `--output-format stream-json`: `{"type":"error","severity":..,
//!   "message":..}` and `{"type":"result","status":"error","error":{"type",
//!   "message"}}`.
//! - Plain text on stderr (every CLI) and the few unmistakable plain-text
//!   lines on stdout (amp's "No API key found. Starting login flow", gemini's
//!   "Please set an Auth method", aider's `litellm.AuthenticationError`).
//!
//! Plain stdout is otherwise not classified: a text-mode agent prints the
//! code it writes, and a story about rate limiting must not stop itself.
//!
//! Decisions: auth stops the agent at once (another request with the same
//! key fails the same way). A rate limit or provider error is recorded; the
//! agent is stopped once the CLI has announced [`MAX_PROVIDER_RETRIES`]
//! consecutive retries of it without any progress in between, so a limited
//! run does not spin until its timeout. A CLI that refuses to start as root
//! yields a hint (not a provider signal) naming the setting to change.

use std::time::Duration;

use serde_json::Value;

use crate::signal::{FailureSignal, SignalKind};

/// Consecutive provider retries (rate limit or 5xx) tolerated before the
/// agent is stopped. The CLIs retry on their own with backoff (Claude up to
/// 10 times over minutes, Codex 5 times): a transient blip clears within one
/// or two retries, while three in a row without a single successful event
/// means the provider is limiting or failing for longer than the agent's own
/// backoff covers. Stopping then hands the decision (cool down, fall back,
/// retry later) to cascade instead of burning the story's whole timeout.
pub const MAX_PROVIDER_RETRIES: u32 = 3;

/// At most this many characters of a provider message are kept.
const MAX_MESSAGE: usize = 300;

/// Which CLI family an agent command belongs to (for advice wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliFamily {
    Claude,
    Codex,
    Gemini,
    Aider,
    Amp,
    Cursor,
    Other,
}

impl CliFamily {
    /// The family of a command (`claude`, `/usr/bin/codex`, `cursor-agent` ...).
    pub fn of_command(command: &str) -> CliFamily {
        let base = std::path::Path::new(command)
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or(command)
            .to_ascii_lowercase();
        match base.as_str() {
            b if b.starts_with("claude") => CliFamily::Claude,
            b if b.starts_with("codex") => CliFamily::Codex,
            b if b.starts_with("gemini") => CliFamily::Gemini,
            b if b.starts_with("aider") => CliFamily::Aider,
            b if b.starts_with("amp") => CliFamily::Amp,
            b if b.starts_with("cursor") => CliFamily::Cursor,
            _ => CliFamily::Other,
        }
    }

    /// What to fix when the provider refused the credentials.
    pub fn auth_advice(self) -> &'static str {
        match self {
            CliFamily::Claude => "check ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the agent's environment, or log in with `claude` then /login (`claude setup-token` for a long-lived token)",
            CliFamily::Codex => "check OPENAI_API_KEY in the agent's environment, or log in with `codex login`",
            CliFamily::Gemini => "set GEMINI_API_KEY (or GOOGLE_API_KEY / Vertex AI settings) in the agent's environment, or pick an auth method in ~/.gemini/settings.json by running `gemini` once",
            CliFamily::Aider => "set the provider's key aider uses (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...) in the agent's environment or aider's .env / .aider.conf.yml",
            CliFamily::Amp => "set AMP_API_KEY in the agent's environment (ampcode.com/settings), or log in with `amp login`",
            CliFamily::Cursor => "set CURSOR_API_KEY in the agent's environment, or log in with `cursor-agent login`",
            CliFamily::Other => "check the agent's API key or login (its `env` in agents.json)",
        }
    }
}

/// Classifies one agent's output, line by line.
#[derive(Debug)]
pub struct Watcher {
    family: CliFamily,
    signal: Option<FailureSignal>,
    consecutive_retries: u32,
    stop: bool,
    hint: Option<String>,
}

impl Watcher {
    /// A watcher for an agent run with `command`.
    pub fn new(command: &str) -> Watcher {
        Watcher {
            family: CliFamily::of_command(command),
            signal: None,
            consecutive_retries: 0,
            stop: false,
            hint: None,
        }
    }

    /// The strongest signal seen so far.
    pub fn signal(&self) -> Option<&FailureSignal> {
        self.signal.as_ref()
    }

    /// Whether the agent should be stopped now.
    pub fn should_stop(&self) -> bool {
        self.stop
    }

    /// A known refusal to start and the setting that fixes it.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// One stdout line. Returns whether the agent should be stopped.
    pub fn stdout_line(&mut self, line: &[u8]) -> bool {
        let text = String::from_utf8_lossy(line);
        let trimmed = text.trim();
        if trimmed.starts_with('{') {
            if let Ok(event @ Value::Object(_)) = serde_json::from_str::<Value>(trimmed) {
                self.event(&event);
                return self.stop;
            }
        }
        // Plain stdout: only the unmistakable lines (see the module doc).
        if let Some(found) = strong_text(trimmed) {
            self.record(found, Retrying::No);
        } else {
            self.late_retry_after(trimmed);
        }
        self.stop
    }

    /// One stderr line. Returns whether the agent should be stopped.
    pub fn stderr_line(&mut self, line: &[u8]) -> bool {
        let text = String::from_utf8_lossy(line);
        let trimmed = text.trim();
        if trimmed.contains("cannot be used with root/sudo privileges") {
            self.hint = Some(root_hint(self.family));
        }
        if let Some(found) = strong_text(trimmed).or_else(|| classify_text(trimmed)) {
            // Text on stderr is most often a CLI announcing a retry.
            self.record(found, Retrying::Yes);
        } else {
            self.late_retry_after(trimmed);
        }
        self.stop
    }

    /// CLIs that print the response's headers put `Retry-After: N` on its
    /// own line after the status: it belongs to the rate limit just seen.
    fn late_retry_after(&mut self, line: &str) {
        if let Some(signal) = self
            .signal
            .as_mut()
            .filter(|s| s.kind == SignalKind::RateLimited && s.retry_after.is_none())
        {
            signal.retry_after = retry_after_in(&line.to_ascii_lowercase());
        }
    }

    fn event(&mut self, event: &Value) {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        let subtype = event.get("subtype").and_then(Value::as_str).unwrap_or("");
        match (kind, subtype) {
            ("system", "api_retry") => {
                if let Some(found) = claude_api_retry(event) {
                    self.record(found, Retrying::Yes);
                }
            }
            ("system", _) => {}
            ("assistant", _) => {
                // Claude's synthetic answers carry the failure in `error`.
                match event.get("error").and_then(Value::as_str) {
                    Some(code) => {
                        let text = crate::stream::assistant_text(event);
                        if let Some(found) = claude_error_code(code, None, &text) {
                            self.record(found, Retrying::No);
                        }
                    }
                    None => self.progress(),
                }
            }
            ("result", _) => {
                if event.get("is_error").and_then(Value::as_bool) == Some(true) {
                    let status = event
                        .get("api_error_status")
                        .and_then(Value::as_u64)
                        .and_then(|s| u16::try_from(s).ok());
                    let text = event
                        .get("result")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if let Some(found) = status
                        .and_then(|s| from_status(s, text))
                        .or_else(|| classify_text(text))
                    {
                        self.record(found, Retrying::No);
                    }
                } else if event.get("status").and_then(Value::as_str) == Some("error") {
                    // Gemini's final result.
                    let message = event
                        .get("error")
                        .map(|e| {
                            e.get("message")
                                .and_then(Value::as_str)
                                .map(str::to_string)
                                .unwrap_or_else(|| e.to_string())
                        })
                        .unwrap_or_default();
                    if let Some(found) = classify_text(&message) {
                        self.record(found, Retrying::No);
                    }
                }
            }
            // Codex: every internal retry is an `error` event ("Reconnecting...
            // 2/5 (...)"); gemini's error events use the same type.
            ("error", _) => {
                let message = event_message(event);
                if event.get("severity").and_then(Value::as_str) == Some("warning") {
                    return;
                }
                let retrying = if message.starts_with("Reconnecting") {
                    Retrying::Yes
                } else {
                    Retrying::No
                };
                if let Some(found) = classify_text(&message) {
                    self.record(found, retrying);
                }
            }
            ("turn.failed", _) => {
                let message = event_message(event);
                if let Some(found) = classify_text(&message) {
                    self.record(found, Retrying::No);
                }
            }
            ("item.completed", _) | ("item.started", _) => {
                let item = event.get("item");
                let item_type = item.and_then(|i| i.get("type")).and_then(Value::as_str);
                if item_type == Some("error") {
                    let message = item.map(event_message).unwrap_or_default();
                    if let Some(found) = classify_text(&message) {
                        self.record(found, Retrying::No);
                    }
                } else {
                    self.progress();
                }
            }
            // Anything else is the agent working: the provider answered.
            _ => self.progress(),
        }
    }

    /// The provider answered: retries are no longer consecutive.
    fn progress(&mut self) {
        self.consecutive_retries = 0;
    }

    fn record(&mut self, found: FailureSignal, retrying: Retrying) {
        let mut found = found;
        if found.advice.is_none() {
            found.advice = Some(advice(found.kind, self.family.auth_advice()));
        }
        match found.kind {
            SignalKind::Auth => self.stop = true,
            _ if retrying == Retrying::Yes => {
                self.consecutive_retries += 1;
                if self.consecutive_retries >= MAX_PROVIDER_RETRIES {
                    self.stop = true;
                }
            }
            _ => {}
        }
        // The strongest kind wins; within a kind the latest says most.
        let keep_old = self
            .signal
            .as_ref()
            .is_some_and(|old| rank(old.kind) > rank(found.kind));
        if !keep_old {
            self.signal = Some(found);
        }
    }
}

/// What to do about a signal of `kind`; `auth` says which key or login to
/// fix (it depends on the agent).
pub fn advice(kind: SignalKind, auth: &str) -> String {
    match kind {
        SignalKind::Auth => auth.to_string(),
        SignalKind::RateLimited => "the provider is rate limiting this key: wait, lower --parallel, or let the run fall back to another agent".to_string(),
        SignalKind::ProviderError => "the provider failed on its side: retry later or fall back to another agent".to_string(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retrying {
    Yes,
    No,
}

fn rank(kind: SignalKind) -> u8 {
    match kind {
        SignalKind::Auth => 3,
        SignalKind::RateLimited => 2,
        SignalKind::ProviderError => 1,
    }
}

fn root_hint(family: CliFamily) -> String {
    match family {
        CliFamily::Claude => "claude refuses --dangerously-skip-permissions as root: set \"IS_SANDBOX\": \"1\" in this agent's \"env\" in agents.json (only inside a container or VM you trust), or run cascade as a normal user".to_string(),
        _ => "the agent refuses to run as root: run cascade as a normal user, or use the agent's sandbox setting".to_string(),
    }
}

/// Claude's `api_retry` event.
fn claude_api_retry(event: &Value) -> Option<FailureSignal> {
    let status = event
        .get("error_status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok());
    let code = event.get("error").and_then(Value::as_str).unwrap_or("");
    let attempt = event.get("attempt").and_then(Value::as_u64).unwrap_or(0);
    let max = event
        .get("max_retries")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let message = format!(
        "API request failed ({}{code}), retry {attempt}/{max}",
        status.map(|s| format!("HTTP {s} ")).unwrap_or_default()
    );
    let mut found = claude_error_code(code, status, &message)?;
    // Claude waits what the provider's Retry-After asked, when it sent one,
    // else its own backoff: either way the time before the next try.
    if found.kind == SignalKind::RateLimited {
        found.retry_after = event
            .get("retry_delay_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis);
    }
    Some(found)
}

/// Claude's error codes (`api_retry.error`, an assistant event's `error`).
fn claude_error_code(code: &str, status: Option<u16>, message: &str) -> Option<FailureSignal> {
    let kind = match code {
        "authentication_failed" | "oauth_org_not_allowed" | "billing_error" => SignalKind::Auth,
        "rate_limit" | "overloaded" => SignalKind::RateLimited,
        "server_error" => SignalKind::ProviderError,
        _ => return status.and_then(|s| from_status(s, message)),
    };
    Some(signal(kind, status, message))
}

/// The kind an HTTP status means, if any.
fn from_status(status: u16, message: &str) -> Option<FailureSignal> {
    let kind = match status {
        401 | 403 => SignalKind::Auth,
        429 | 529 => SignalKind::RateLimited,
        500..=599 => SignalKind::ProviderError,
        _ => return None,
    };
    Some(signal(kind, Some(status), message))
}

fn signal(kind: SignalKind, http_status: Option<u16>, message: &str) -> FailureSignal {
    FailureSignal {
        kind,
        http_status,
        retry_after: None,
        message: one_line(message),
        advice: None,
    }
}

/// Lines that mean one thing wherever they appear (stdout or stderr).
fn strong_text(line: &str) -> Option<FailureSignal> {
    const AUTH: &[&str] = &[
        "No API key found. Starting login flow",
        "Please set an Auth method",
        "Not logged in · Please run /login",
        "litellm.AuthenticationError",
        "Invalid API key · Please run /login",
    ];
    if AUTH.iter().any(|p| line.contains(p)) {
        return Some(signal(SignalKind::Auth, None, line));
    }
    if line.contains("litellm.RateLimitError") {
        return Some(signal(SignalKind::RateLimited, None, line));
    }
    if line.contains("litellm.InternalServerError")
        || line.contains("litellm.ServiceUnavailableError")
    {
        return Some(signal(SignalKind::ProviderError, None, line));
    }
    None
}

/// Classifies an error message (a JSON event's message or a stderr line).
pub fn classify_text(text: &str) -> Option<FailureSignal> {
    let lower = text.to_ascii_lowercase();
    let status = http_status_in(&lower);
    if let Some(found) = status.and_then(|s| from_status(s, text)) {
        let mut found = found;
        found.retry_after = retry_after_in(&lower);
        return Some(found);
    }
    const AUTH: &[&str] = &[
        "invalid api key",
        "invalid x-api-key",
        "incorrect api key",
        "api key not valid",
        "authentication_failed",
        "authentication_error",
        "unauthorized",
        "not logged in",
        "please run /login",
        "oauth token has been revoked",
        "oauth token has expired",
        "permission_denied",
        "no api key",
    ];
    const RATE: &[&str] = &[
        "rate limit",
        "rate_limit",
        "ratelimit",
        "too many requests",
        "overloaded",
        "resource_exhausted",
        "quota exceeded",
        "exceeded your current quota",
        "usage limit",
    ];
    const PROVIDER: &[&str] = &[
        "internal server error",
        "service unavailable",
        "bad gateway",
        "gateway timeout",
        "server_error",
        "api_error",
        // codex's words for an HTTP 500 from the Responses API.
        "experiencing high demand",
    ];
    let kind = if AUTH.iter().any(|p| lower.contains(p)) {
        SignalKind::Auth
    } else if RATE.iter().any(|p| lower.contains(p)) {
        SignalKind::RateLimited
    } else if PROVIDER.iter().any(|p| lower.contains(p)) {
        SignalKind::ProviderError
    } else {
        return None;
    };
    let mut found = signal(kind, None, text);
    if kind == SignalKind::RateLimited {
        found.retry_after = retry_after_in(&lower);
    }
    Some(found)
}

/// An HTTP status named in an error message: "status 401", "status: 429",
/// "401 Unauthorized", "HTTP 503", "(529)". Only statuses that mean
/// something here (401, 403, 429, 5xx) and only next to a word that makes
/// them a status, so "line 500" or "500 files" do not count.
fn http_status_in(lower: &str) -> Option<u16> {
    const REASONS: &[(&str, u16)] = &[
        ("401 unauthorized", 401),
        ("403 forbidden", 403),
        ("429 too many requests", 429),
        ("500 internal server error", 500),
        ("502 bad gateway", 502),
        ("503 service unavailable", 503),
        ("504 gateway timeout", 504),
        ("529 overloaded", 529),
    ];
    if let Some((_, s)) = REASONS.iter().find(|(p, _)| lower.contains(p)) {
        return Some(*s);
    }
    for marker in [
        "status: ",
        "status ",
        "status=",
        "http ",
        "http/1.1 ",
        "code: ",
        "error code ",
    ] {
        let mut from = 0;
        while let Some(pos) = lower[from..].find(marker) {
            let start = from + pos + marker.len();
            let digits: String = lower[start..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if digits.len() == 3 {
                if let Ok(s) = digits.parse::<u16>() {
                    if matches!(s, 401 | 403 | 429 | 500..=599) {
                        return Some(s);
                    }
                }
            }
            from = start;
        }
    }
    None
}

/// "retry after 30s", "retry-after: 12", "try again in 20 seconds".
fn retry_after_in(lower: &str) -> Option<Duration> {
    for marker in [
        "retry-after: ",
        "retry after ",
        "try again in ",
        "retry_after\":",
    ] {
        if let Some(pos) = lower.find(marker) {
            let rest = lower[pos + marker.len()..].trim_start();
            let num: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            if let Ok(n) = num.parse::<f64>() {
                let unit = rest[num.len()..].trim_start();
                let secs = if unit.starts_with("ms") {
                    n / 1000.0
                } else if unit.starts_with('m') {
                    n * 60.0
                } else {
                    n
                };
                if secs.is_finite() && secs >= 0.0 {
                    return Some(Duration::from_secs_f64(secs));
                }
            }
        }
    }
    None
}

/// The message of a JSON error event (`message`, `error.message`, `error`).
fn event_message(event: &Value) -> String {
    if let Some(m) = event.get("message").and_then(Value::as_str) {
        return m.to_string();
    }
    match event.get("error") {
        Some(Value::String(s)) => s.clone(),
        Some(e) => e
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string()),
        None => String::new(),
    }
}

fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= MAX_MESSAGE {
        return line;
    }
    let mut out: String = line.chars().take(MAX_MESSAGE).collect();
    out.push_str("...");
    out
}

/// The lines of an agent's output that say what went wrong, best first:
/// lines naming an error (error, fatal, unexpected, refused, denied,
/// invalid, cannot, failed) are preferred over the last line, which is
/// often a generic "For more information, try '--help'." Returns at most
/// `max` lines, in their original order.
pub fn telling_lines(text: &str, max: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "error",
        "fatal",
        "unexpected",
        "refused",
        "denied",
        "invalid",
        "cannot",
        "can't",
        "failed",
        "not found",
        "unauthorized",
        "panicked",
    ];
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let telling: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            WORDS.iter().any(|w| lower.contains(w))
                // A JSON event line is not a message for people.
                && !l.starts_with('{')
        })
        .collect();
    let chosen: Vec<&str> = if telling.is_empty() {
        lines.last().copied().into_iter().collect()
    } else {
        let skip = telling.len().saturating_sub(max);
        telling[skip..].to_vec()
    };
    chosen.into_iter().map(one_line).collect()
}

#[cfg(test)]
mod tests;
