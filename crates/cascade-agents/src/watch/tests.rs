//! Watcher tests on event lines shaped like the real CLIs' output
//! (Claude Code 2.1, codex-cli 0.169, gemini 0.61, amp, aider).

use super::*;

fn feed_stdout(w: &mut Watcher, lines: &str) -> Vec<bool> {
    lines.lines().map(|l| w.stdout_line(l.as_bytes())).collect()
}

fn retry(status: u16, error: &str, attempt: u32) -> String {
    format!(
        r#"{{"type":"system","subtype":"api_retry","attempt":{attempt},"max_retries":10,"retry_delay_ms":5000,"error_status":{status},"error":"{error}","session_id":"s1","uuid":"u"}}"#
    )
}

#[test]
fn claude_auth_retry_stops_at_once_with_advice() {
    let mut w = Watcher::new("claude");
    assert!(!w.stdout_line(br#"{"type":"system","subtype":"init","session_id":"s1"}"#));
    assert!(w.stdout_line(retry(401, "authentication_failed", 1).as_bytes()));
    let s = w.signal().unwrap();
    assert_eq!(s.kind, SignalKind::Auth);
    assert_eq!(s.http_status, Some(401));
    assert!(s.advice.as_deref().unwrap().contains("ANTHROPIC_API_KEY"));
    assert!(s.message.contains("HTTP 401"), "{}", s.message);
}

#[test]
fn claude_rate_limit_stops_after_consecutive_retries_only() {
    let mut w = Watcher::new("/usr/local/bin/claude");
    for attempt in 1..MAX_PROVIDER_RETRIES {
        assert!(!w.stdout_line(retry(429, "rate_limit", attempt).as_bytes()));
    }
    // Progress in between resets the count.
    assert!(!w.stdout_line(
        br#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#
    ));
    for attempt in 1..MAX_PROVIDER_RETRIES {
        assert!(!w.stdout_line(retry(529, "overloaded", attempt).as_bytes()));
    }
    assert!(w.stdout_line(retry(429, "rate_limit", 3).as_bytes()));
    let s = w.signal().unwrap();
    assert_eq!(s.kind, SignalKind::RateLimited);
    assert_eq!(s.retry_after, Some(Duration::from_millis(5000)));
}

#[test]
fn claude_server_error_is_provider_error_and_auth_outranks_it() {
    let mut w = Watcher::new("claude");
    w.stdout_line(retry(500, "server_error", 1).as_bytes());
    assert_eq!(w.signal().unwrap().kind, SignalKind::ProviderError);
    assert!(!w.should_stop());
    w.stdout_line(retry(403, "authentication_failed", 2).as_bytes());
    w.stdout_line(retry(503, "server_error", 3).as_bytes());
    assert_eq!(w.signal().unwrap().kind, SignalKind::Auth);
}

#[test]
fn claude_not_logged_in_answer_and_error_result() {
    let mut w = Watcher::new("claude");
    let stop = feed_stdout(
        &mut w,
        r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"Not logged in · Please run /login"}]},"session_id":"s","error":"authentication_failed"}"#,
    );
    assert_eq!(stop, [true]);
    assert_eq!(w.signal().unwrap().kind, SignalKind::Auth);

    let mut w = Watcher::new("claude");
    w.stdout_line(br#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429 rate limited"}"#);
    assert_eq!(w.signal().unwrap().kind, SignalKind::RateLimited);
}

#[test]
fn claude_root_refusal_gives_the_is_sandbox_hint_not_a_signal() {
    let mut w = Watcher::new("claude");
    w.stderr_line(b"--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons");
    assert!(w.hint().unwrap().contains("IS_SANDBOX"));
    assert!(w.signal().is_none());
    assert!(!w.should_stop());
}

#[test]
fn codex_reconnect_events_count_as_retries() {
    let mut w = Watcher::new("codex");
    let lines = r#"{"type":"thread.started","thread_id":"t1"}
{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 1/5 (unexpected status 429 Too Many Requests: Rate limit reached, please try again in 20s)"}
{"type":"error","message":"Reconnecting... 2/5 (unexpected status 429 Too Many Requests: Rate limit reached, please try again in 20s)"}
{"type":"error","message":"Reconnecting... 3/5 (unexpected status 429 Too Many Requests: Rate limit reached, please try again in 20s)"}"#;
    assert_eq!(
        feed_stdout(&mut w, lines),
        [false, false, false, false, true]
    );
    let s = w.signal().unwrap();
    assert_eq!(
        (s.kind, s.http_status),
        (SignalKind::RateLimited, Some(429))
    );
    assert_eq!(s.retry_after, Some(Duration::from_secs(20)));
    assert!(s.advice.is_some());
}

#[test]
fn codex_unauthorized_turn_failure_and_stderr() {
    let mut w = Watcher::new("codex");
    assert!(w.stdout_line(br#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: Incorrect API key provided"}}"#));
    let s = w.signal().unwrap();
    assert_eq!((s.kind, s.http_status), (SignalKind::Auth, Some(401)));
    assert!(s.advice.as_deref().unwrap().contains("codex login"));

    let mut w = Watcher::new("codex");
    assert!(!w.stderr_line(
        b"2026-11-24T12:25:50Z ERROR codex_api::endpoint::responses_websocket: failed to connect"
    ));
    assert!(w.signal().is_none());
    w.stderr_line(b"ERROR: exceeded retry limit, last status: 500 Internal Server Error");
    assert_eq!(w.signal().unwrap().kind, SignalKind::ProviderError);
}

#[test]
fn gemini_events_and_plain_text_login_prompt() {
    let mut w = Watcher::new("gemini");
    w.stdout_line(br#"{"type":"error","severity":"warning","message":"Loop detected: rate limit of tool calls"}"#);
    assert!(w.signal().is_none(), "warnings are not failures");
    w.stdout_line(br#"{"type":"result","status":"error","error":{"type":"Error","message":"[API Error: 429 Too Many Requests RESOURCE_EXHAUSTED]"}}"#);
    assert_eq!(w.signal().unwrap().kind, SignalKind::RateLimited);

    let mut w = Watcher::new("gemini");
    assert!(w.stderr_line(b"Please set an Auth method in your /root/.gemini/settings.json or specify one of the following environment variables before running: GEMINI_API_KEY"));
    assert!(w
        .signal()
        .unwrap()
        .advice
        .as_deref()
        .unwrap()
        .contains("GEMINI_API_KEY"));
}

#[test]
fn amp_login_flow_on_stdout_stops_the_agent() {
    let mut w = Watcher::new("amp");
    assert!(w.stdout_line(b"No API key found. Starting login flow..."));
    assert!(w
        .signal()
        .unwrap()
        .advice
        .as_deref()
        .unwrap()
        .contains("AMP_API_KEY"));
}

#[test]
fn plain_stdout_about_rate_limits_is_not_a_signal() {
    // A text-mode agent (aider) printing the code it writes.
    let mut w = Watcher::new("aider");
    for line in [
        "def handle(resp):",
        "    if resp.status == 429:  # Too Many Requests: rate limit",
        "        raise Unauthorized('401 Unauthorized')",
    ] {
        assert!(!w.stdout_line(line.as_bytes()));
    }
    assert!(w.signal().is_none());
    assert!(w.stdout_line(b"litellm.AuthenticationError: AnthropicException - invalid x-api-key"));
}

#[test]
fn status_numbers_need_a_status_word() {
    assert!(classify_text("error at line 500 of foo.rs").is_none());
    assert_eq!(http_status_in("request failed with status: 503"), Some(503));
    assert_eq!(http_status_in("http 429"), Some(429));
    assert_eq!(http_status_in("500 files changed"), None);
    assert_eq!(
        retry_after_in("retry-after: 12"),
        Some(Duration::from_secs(12))
    );
    assert_eq!(
        retry_after_in("try again in 1.5s"),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        retry_after_in("retry after 2 minutes"),
        Some(Duration::from_secs(120))
    );
}

#[test]
fn telling_lines_prefer_what_went_wrong_over_the_last_line() {
    let codex = "error: unexpected argument '--full-auto' found\n\n  tip: to pass '--full-auto' as a value, use '-- --full-auto'\n\nUsage: codex exec [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.\n";
    assert_eq!(
        telling_lines(codex, 2),
        ["error: unexpected argument '--full-auto' found"]
    );
    assert_eq!(telling_lines("all good\nlast words\n", 2), ["last words"]);
    assert!(telling_lines("", 2).is_empty());
}

#[test]
fn codex_high_demand_reconnects_are_provider_errors() {
    let mut w = Watcher::new("codex");
    let line = r#"{"type":"error","message":"Reconnecting... 1/5 (We’re currently experiencing high demand, which may cause temporary errors.)"}"#;
    let stops: Vec<bool> = (0..MAX_PROVIDER_RETRIES)
        .map(|_| w.stdout_line(line.as_bytes()))
        .collect();
    assert_eq!(stops.last(), Some(&true));
    assert_eq!(w.signal().unwrap().kind, SignalKind::ProviderError);
}

#[test]
fn a_retry_after_header_on_the_next_line_belongs_to_the_rate_limit() {
    let mut w = Watcher::new("my-agent");
    w.stderr_line(b"Error: 429 Too Many Requests");
    assert_eq!(w.signal().unwrap().retry_after, None);
    w.stderr_line(b"Retry-After: 2");
    let s = w.signal().unwrap();
    assert_eq!(s.kind, SignalKind::RateLimited);
    assert_eq!(s.retry_after, Some(Duration::from_secs(2)));
    // A later one does not replace the first.
    w.stderr_line(b"retry-after: 600");
    assert_eq!(
        w.signal().unwrap().retry_after,
        Some(Duration::from_secs(2))
    );
}
