//! Parser tests on stream samples written for these tests (shaped like the
//! real CLIs' output).

use super::*;

fn parse(text: &str) -> StreamSummary {
    let mut p = StreamParser::new();
    for line in text.lines() {
        p.feed_line(line.as_bytes());
    }
    p.summary()
}

const CLAUDE: &str = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"9f1c-42","tools":["Bash","Edit"],"model":"claude-sonnet"}
{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Let me look at the code."},{"type":"tool_use","id":"tu_1","name":"Bash","input":{"command":"echo '<review>PASS</review>'"}}],"usage":{"input_tokens":10,"output_tokens":5}},"session_id":"9f1c-42"}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"<review>PASS</review>"}]},"session_id":"9f1c-42"}
{"type":"assistant","message":{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"text","text":"The implementation is incomplete.\n\u003creview\u003e\nNEEDS_REVISION\n\u003c/review\u003e"}]},"session_id":"9f1c-42"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":5321,"num_turns":3,"result":"The implementation is incomplete.\n<review>\nNEEDS_REVISION\n</review>","session_id":"9f1c-42","total_cost_usd":0.0421,"usage":{"input_tokens":1200,"cache_creation_input_tokens":300,"cache_read_input_tokens":4000,"output_tokens":650}}"#;

#[test]
fn claude_stream_json_result_session_usage_cost_and_review() {
    let s = parse(CLAUDE);
    assert_eq!(s.session_id.as_deref(), Some("9f1c-42"));
    assert_eq!(
        s.final_text.as_deref(),
        Some("The implementation is incomplete.\n<review>\nNEEDS_REVISION\n</review>")
    );
    let u = s.usage.unwrap();
    assert_eq!(u.input_tokens, 1200);
    assert_eq!(u.output_tokens, 650);
    assert_eq!(u.cached_input_tokens, 4300);
    assert_eq!(u.cost_usd, Some(0.0421));
    // The PASS inside a tool call and a tool result is not the agent's verdict.
    assert_eq!(s.review, Some(ReviewVerdict::NeedsRevision));
    assert_eq!(s.json_events, 5);
    assert_eq!(s.reported_error, None);
}

#[test]
fn claude_without_result_falls_back_to_last_assistant_text() {
    let s = parse(
        r#"{"type":"system","subtype":"init","session_id":"abc"}
{"type":"assistant","message":{"content":[{"type":"text","text":"first"}]}}
{"type":"assistant","message":{"content":[{"type":"text","text":"Looks good: <review>PASS</review>"}]}}"#,
    );
    assert_eq!(
        s.final_text.as_deref(),
        Some("Looks good: <review>PASS</review>")
    );
    assert_eq!(s.review, Some(ReviewVerdict::Pass));
    assert_eq!(s.usage, None);
}

#[test]
fn claude_error_result_and_old_cost_field() {
    let s = parse(
        r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s1","cost_usd":0.5,"usage":{"input_tokens":1,"output_tokens":2}}"#,
    );
    assert_eq!(s.reported_error.as_deref(), Some("error_max_turns"));
    assert_eq!(s.usage.unwrap().cost_usd, Some(0.5));
}

#[test]
fn codex_exec_json_events() {
    let s = parse(
        r#"{"type":"thread.started","thread_id":"0199a213-81c0"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Planning** <review>PASS</review>"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"a\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Done. <review>NEEDS REVISION</review>"}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Fixed it.\n<review>PASS</review>"}}
{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":0,"output_tokens":10}}"#,
    );
    assert_eq!(s.session_id.as_deref(), Some("0199a213-81c0"));
    assert_eq!(
        s.final_text.as_deref(),
        Some("Fixed it.\n<review>PASS</review>")
    );
    let u = s.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cached_input_tokens),
        (24863, 132, 24448)
    );
    assert_eq!(u.cost_usd, None);
    assert_eq!(s.review, Some(ReviewVerdict::Pass));
}

#[test]
fn codex_legacy_msg_envelope() {
    let s = parse(
        r#"{"id":"0","msg":{"type":"session_configured","session_id":"sess-1","model":"gpt-5"}}
{"id":"1","msg":{"type":"agent_message","message":"hello"}}
{"id":"1","msg":{"type":"token_count","input_tokens":50,"cached_input_tokens":5,"output_tokens":7}}
{"id":"1","msg":{"type":"token_count","info":{"total_token_usage":{"input_tokens":80,"cached_input_tokens":5,"output_tokens":9}}}}
{"id":"1","msg":{"type":"task_complete","last_agent_message":"all done"}}"#,
    );
    assert_eq!(s.session_id.as_deref(), Some("sess-1"));
    assert_eq!(s.final_text.as_deref(), Some("all done"));
    let u = s.usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (80, 9));
}

#[test]
fn codex_failed_turn_is_reported() {
    let s = parse(r#"{"type":"turn.failed","error":{"message":"rate limited"}}"#);
    assert_eq!(s.reported_error.as_deref(), Some("rate limited"));
}

#[test]
fn plain_text_markers_across_lines_and_escapes() {
    let s = parse("Reviewing...\n< Review >\n  needs_revision\n</review>\nmore text\n");
    assert_eq!(s.review, Some(ReviewVerdict::NeedsRevision));
    assert_eq!(s.final_text, None);
    assert_eq!(s.json_events, 0);

    let s = parse("verdict: &lt;review&gt;PASS&lt;/review&gt;");
    assert_eq!(s.review, Some(ReviewVerdict::Pass));

    // The last marker wins; unknown verdicts are ignored.
    let s = parse("<review>PASS</review>\n<review>MAYBE</review>\n<review>NEEDS-REVISION</review>");
    assert_eq!(s.review, Some(ReviewVerdict::NeedsRevision));

    // Not markers.
    let s = parse("we review> PASS and <review>\n".repeat(3).as_str());
    assert_eq!(s.review, None);
}

#[test]
fn review_scanner_handles_any_split() {
    let text = "blah blah <review>\r\n  NEEDS_REVISION \n</review> tail";
    for cut in 0..=text.len() {
        if !text.is_char_boundary(cut) {
            continue;
        }
        let mut r = ReviewScanner::new();
        r.feed(&text[..cut]);
        r.feed(&text[cut..]);
        assert_eq!(
            r.verdict(),
            Some(ReviewVerdict::NeedsRevision),
            "cut at {cut}"
        );
    }
    // Byte-by-byte as well.
    let mut r = ReviewScanner::new();
    for c in "x<review>pass</review>".chars() {
        r.feed(&c.to_string());
    }
    assert_eq!(r.verdict(), Some(ReviewVerdict::Pass));
}

#[test]
fn scanner_memory_stays_bounded() {
    let mut r = ReviewScanner::new();
    let chunk = "lorem ipsum dolor sit amet ".repeat(100);
    for _ in 0..1000 {
        r.feed(&chunk);
    }
    assert!(r.carry.len() <= MAX_MARKER, "{}", r.carry.len());
    // An opened but never closed marker does not grow without bound either.
    r.feed("<review>");
    for _ in 0..100 {
        r.feed(&chunk);
    }
    assert!(r.carry.len() <= MAX_MARKER + chunk.len());
    assert_eq!(r.verdict(), None);
}

#[test]
fn invalid_utf8_and_junk_lines_do_not_break_parsing() {
    let mut p = StreamParser::new();
    p.feed_line(b"\xff\xfe not utf8 \x80");
    p.feed_line(b"{ broken json");
    p.feed_line(br#"{"type":"result","result":"ok \u00e9","session_id":"z"}"#);
    p.feed_line(b"[1,2,3]");
    let s = p.summary();
    assert_eq!(s.final_text.as_deref(), Some("ok \u{e9}"));
    assert_eq!(s.session_id.as_deref(), Some("z"));
}

#[test]
fn huge_final_text_is_bounded() {
    let big = "é".repeat(MAX_FINAL_TEXT);
    let line = serde_json::json!({"type": "result", "result": big}).to_string();
    let mut p = StreamParser::new();
    p.feed_line(line.as_bytes());
    let text = p.summary().final_text.unwrap();
    assert!(text.len() <= MAX_FINAL_TEXT);
    assert!(text.chars().all(|c| c == 'é'));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A marker is found however the text around it is cut into pieces.
        #[test]
        fn marker_found_under_any_chunking(
            before in "[a-zA-Z <>/\n]{0,300}",
            after in "[a-zA-Z <>/\n]{0,300}",
            cuts in proptest::collection::vec(0usize..700, 0..8),
        ) {
            // Text around the marker must not itself contain review tags.
            prop_assume!(!before.to_lowercase().contains("review") && !after.to_lowercase().contains("review"));
            let text = format!("{before}<review>\nNEEDS_REVISION\n</review>{after}");
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            points.sort();
            let mut r = ReviewScanner::new();
            let mut last = 0;
            for p in points {
                r.feed(&text[last..p]);
                last = p;
            }
            r.feed(&text[last..]);
            prop_assert_eq!(r.verdict(), Some(ReviewVerdict::NeedsRevision));
        }
    }
}

/// Shaped like gemini 0.61's `--output-format stream-json` (init, user
/// message, assistant deltas, tool use/result, result with stats).
const GEMINI: &str = r#"{"type":"init","timestamp":"2026-11-24T10:00:00.000Z","session_id":"6a0b1f7e-1111-4c2b-9d7e-0123456789ab","model":"gemini-2.5-pro"}
{"type":"message","timestamp":"2026-11-24T10:00:00.100Z","role":"user","content":"Implement story-001"}
{"type":"message","timestamp":"2026-11-24T10:00:01.000Z","role":"assistant","content":"I will write ","delta":true}
{"type":"message","timestamp":"2026-11-24T10:00:01.100Z","role":"assistant","content":"the file.","delta":true}
{"type":"tool_use","timestamp":"2026-11-24T10:00:02.000Z","tool_name":"write_file","tool_id":"t1","parameters":{"file_path":"a.txt","content":"x"}}
{"type":"tool_result","timestamp":"2026-11-24T10:00:02.500Z","tool_id":"t1","status":"success"}
{"type":"message","timestamp":"2026-11-24T10:00:03.000Z","role":"assistant","content":"Done: <review>","delta":true}
{"type":"message","timestamp":"2026-11-24T10:00:03.100Z","role":"assistant","content":"PASS</review>","delta":true}
{"type":"result","timestamp":"2026-11-24T10:00:04.000Z","status":"success","stats":{"total_tokens":1700,"input_tokens":1500,"output_tokens":200,"cached":1000,"input":500,"duration_ms":4000,"tool_calls":1}}"#;

#[test]
fn gemini_stream_json_session_text_usage_and_review() {
    let s = parse(GEMINI);
    assert_eq!(
        s.session_id.as_deref(),
        Some("6a0b1f7e-1111-4c2b-9d7e-0123456789ab")
    );
    // Deltas after the tool call form the final message; earlier ones do not leak in.
    assert_eq!(s.final_text.as_deref(), Some("Done: <review>PASS</review>"));
    assert_eq!(s.review, Some(ReviewVerdict::Pass));
    let u = s.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cached_input_tokens, u.output_tokens),
        (500, 1000, 200)
    );
    assert_eq!(u.cost_usd, None);
    assert_eq!(s.reported_error, None);
}

#[test]
fn gemini_error_result_is_reported() {
    let s = parse(
        r#"{"type":"result","status":"error","error":{"type":"FatalAuthenticationError","message":"API key not valid"},"stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0}}"#,
    );
    assert_eq!(s.reported_error.as_deref(), Some("API key not valid"));
}
