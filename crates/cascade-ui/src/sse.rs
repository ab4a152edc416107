//! `GET /api/events`: the run's records as server-sent events.
//!
//! The stream opens with the records so far after `Last-Event-ID` (or the
//! `last_event_id` query parameter, as EventSource cannot set headers on
//! its first request), then follows new ones. Engine events are plain
//! `data:` messages (the event's JSON as `approve --json` prints it, plus
//! `t_ms` and `ts`), agent output lines are `event: agent_output`, a
//! control request is `event: control` besides its plain message, and
//! `event: run` says the run on show changed (a new run went live, or
//! the live one ended): the page then reloads its snapshot. A comment
//! every 15 s keeps proxies from closing an idle stream.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::hub::Feed;
use crate::live::Record;
use crate::routes::Shared;

/// The SSE text of one record.
pub(crate) fn message(r: &Record) -> String {
    let mut data = r.data.clone();
    if let Value::Object(m) = &mut data {
        m.insert("t_ms".into(), json!(r.t_ms));
        m.insert("ts".into(), json!(r.ts));
    }
    let line = serde_json::to_string(&data).unwrap_or_default();
    match r.kind.as_str() {
        "agent_output" => format!("id: {}\nevent: agent_output\ndata: {line}\n\n", r.seq),
        _ => {
            let mut out = format!("id: {}\ndata: {line}\n\n", r.seq);
            if data.get("event").and_then(Value::as_str) == Some("control") {
                out.push_str(&format!("event: control\ndata: {line}\n\n"));
            }
            out
        }
    }
}

pub(crate) async fn events(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or(q.get("last_event_id").map(String::as_str))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let (past, rx) = app.hub.subscribe(after);
    let status = app.hub.status();
    let first = format!(
        "retry: 2000\nevent: run\ndata: {}\n\n{}",
        serde_json::to_string(&status).unwrap_or_default(),
        past.iter().map(|r| message(r)).collect::<String>()
    );
    let hub = std::sync::Arc::clone(&app.hub);
    let stream =
        futures_util::stream::unfold((Some(first), rx, hub), |(first, mut rx, hub)| async move {
            if let Some(text) = first {
                return Some((Ok::<Bytes, Infallible>(Bytes::from(text)), (None, rx, hub)));
            }
            let text = match tokio::time::timeout(Duration::from_secs(15), rx.recv()).await {
                Err(_) => ": keep-alive\n\n".to_string(),
                Ok(Ok(Feed::Record(r))) => message(&r),
                // The run on show changed, or too slow a reader lost
                // records: either way the page reloads its snapshot.
                Ok(Ok(Feed::Source)) | Ok(Err(RecvError::Lagged(_))) => format!(
                    "event: run\ndata: {}\n\n",
                    serde_json::to_string(&hub.status()).unwrap_or_default()
                ),
                Ok(Err(RecvError::Closed)) => return None,
            };
            Some((Ok(Bytes::from(text)), (None, rx, hub)))
        });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_become_sse_messages() {
        let r = Record {
            seq: 7,
            t_ms: 12,
            ts: 99,
            kind: "event".into(),
            data: json!({"event": "story_started", "story": "s1"}),
        };
        let m = message(&r);
        assert!(m.starts_with("id: 7\ndata: {"), "{m}");
        assert!(m.contains("\"t_ms\":12"));
        assert!(m.ends_with("\n\n"));
        let o = Record {
            kind: "agent_output".into(),
            data: json!({"story": "s1", "attempt": 1, "text": "hi"}),
            ..r.clone()
        };
        assert!(message(&o).starts_with("id: 7\nevent: agent_output\ndata: "));
        let c = Record {
            data: json!({"event": "control", "action": "pause", "by": "ui", "ok": true, "message": "m"}),
            ..r
        };
        assert!(message(&c).contains("event: control\ndata: "));
    }
}
