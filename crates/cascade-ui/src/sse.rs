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
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast::error::RecvError;

use crate::hub::{Entry, Feed};
use crate::routes::Shared;

/// The SSE text of one record: `data` is the record's data as compact
/// JSON (an object), sent with `t_ms` and `ts` added; a control request
/// (`control`) goes out a second time as `event: control`. Written into
/// one string of the right size: the dashboard makes one per record of a
/// run's journal when it starts.
pub(crate) fn message(
    seq: u64,
    kind: &str,
    data: &str,
    (t_ms, ts): (u64, u64),
    control: bool,
) -> String {
    let copies = if control { 2 } else { 1 };
    let mut out = String::with_capacity(copies * (data.len() + 64) + 32);
    out.push_str("id: ");
    out.push_str(itoa::Buffer::new().format(seq));
    out.push('\n');
    if kind == "agent_output" {
        out.push_str("event: agent_output\n");
    }
    out.push_str("data: ");
    with_times(&mut out, data, t_ms, ts);
    out.push_str("\n\n");
    if control && kind != "agent_output" {
        out.push_str("event: control\ndata: ");
        with_times(&mut out, data, t_ms, ts);
        out.push_str("\n\n");
    }
    out
}

/// Appends `{...}` with `"t_ms"` and `"ts"` added as its last members (as
/// text: the object is not parsed again).
fn with_times(out: &mut String, data: &str, t_ms: u64, ts: u64) {
    let times = |out: &mut String| {
        out.push_str("\"t_ms\":");
        out.push_str(itoa::Buffer::new().format(t_ms));
        out.push_str(",\"ts\":");
        out.push_str(itoa::Buffer::new().format(ts));
        out.push('}');
    };
    let body = data.trim_end();
    match body.strip_suffix('}') {
        Some(open) if open.trim_end() == "{" => {
            out.push('{');
            times(out);
        }
        Some(open) => {
            out.push_str(open);
            out.push(',');
            times(out);
        }
        // Not an object: sent as it is.
        None => out.push_str(body),
    }
}

/// Long bodies (replayed records, the run snapshot) go out in pieces of
/// about this many bytes: the first ones leave at once, and the whole is
/// never held at once (at 100,000 stories it is tens of megabytes).
pub(crate) const PIECE: usize = 256 * 1024;

/// What a new stream sends before the live records: its opening message,
/// then the records so far.
struct Replay {
    first: Option<String>,
    past: Arc<[Arc<Entry>]>,
    /// The first record of `past` not sent yet.
    next: usize,
}

impl Replay {
    /// The next piece to send (`None`: all sent).
    fn next_piece(&mut self) -> Option<String> {
        let mut text = self.first.take().unwrap_or_default();
        while text.len() < PIECE {
            let Some(r) = self.past.get(self.next) else {
                break;
            };
            text.push_str(&r.sse);
            self.next += 1;
        }
        if self.next == self.past.len() {
            // Sent: the stream goes on without holding the records.
            self.past = Arc::new([]);
            self.next = 0;
        }
        (!text.is_empty()).then_some(text)
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
    // A finished run's records may be read first: off the async workers.
    let hub = std::sync::Arc::clone(&app.hub);
    let (past, rx) = match crate::api::blocking(move || hub.subscribe(after)).await {
        Ok(subscribed) => subscribed,
        Err(response) => return response,
    };
    let status = app.hub.status();
    let first = format!(
        "retry: 2000\nevent: run\ndata: {}\n\n",
        serde_json::to_string(&status).unwrap_or_default(),
    );
    let replay = Replay {
        first: Some(first),
        past: past.into(),
        next: 0,
    };
    let hub = std::sync::Arc::clone(&app.hub);
    let stream =
        futures_util::stream::unfold((replay, rx, hub), |(mut replay, mut rx, hub)| async move {
            loop {
                if let Some(text) = replay.next_piece() {
                    return Some((
                        Ok::<Bytes, Infallible>(Bytes::from(text)),
                        (replay, rx, hub),
                    ));
                }
                let text = match tokio::time::timeout(Duration::from_secs(15), rx.recv()).await {
                    Err(_) => ": keep-alive\n\n".to_string(),
                    Ok(Ok(Feed::Record(r))) => r.sse.to_string(),
                    // A run put on show: its records go out in pieces, as a
                    // new stream's do.
                    Ok(Ok(Feed::Records(records))) => {
                        replay.past = records;
                        replay.next = 0;
                        continue;
                    }
                    // The run on show changed, or too slow a reader lost
                    // records: either way the page reloads its snapshot.
                    Ok(Ok(Feed::Source)) | Ok(Err(RecvError::Lagged(_))) => format!(
                        "event: run\ndata: {}\n\n",
                        serde_json::to_string(&hub.status()).unwrap_or_default()
                    ),
                    Ok(Err(RecvError::Closed)) => return None,
                };
                return Some((Ok(Bytes::from(text)), (replay, rx, hub)));
            }
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
        let m = message(
            7,
            "event",
            r#"{"event":"story_started","story":"s1"}"#,
            (12, 99),
            false,
        );
        assert_eq!(
            m,
            "id: 7\ndata: {\"event\":\"story_started\",\"story\":\"s1\",\"t_ms\":12,\"ts\":99}\n\n"
        );
        let o = message(
            7,
            "agent_output",
            r#"{"story":"s1","attempt":1,"text":"hi"}"#,
            (1, 2),
            false,
        );
        assert_eq!(
            o,
            "id: 7\nevent: agent_output\ndata: {\"story\":\"s1\",\"attempt\":1,\"text\":\"hi\",\"t_ms\":1,\"ts\":2}\n\n"
        );
        let c = message(
            7,
            "event",
            r#"{"event":"control","action":"pause","by":"ui","ok":true,"message":"m"}"#,
            (1, 2),
            true,
        );
        let line = r#"{"event":"control","action":"pause","by":"ui","ok":true,"message":"m","t_ms":1,"ts":2}"#;
        assert_eq!(
            c,
            format!("id: 7\ndata: {line}\n\nevent: control\ndata: {line}\n\n")
        );
        // Not an object: sent as it is; white space after an object is
        // dropped, and an empty object gets the times alone.
        assert_eq!(
            message(18_446_744_073_709_551_615, "event", "\"x\" ", (0, 0), false),
            "id: 18446744073709551615\ndata: \"x\"\n\n"
        );
        assert_eq!(
            message(2, "event", "{ } \n", (5, 6), false),
            "id: 2\ndata: {\"t_ms\":5,\"ts\":6}\n\n"
        );
        assert_eq!(
            message(1, "event", "{}", (3, 4), false),
            "id: 1\ndata: {\"t_ms\":3,\"ts\":4}\n\n"
        );
    }
}
