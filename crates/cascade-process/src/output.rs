//! Reading a child's output: bounded in-memory tails, the shared log file and
//! the optional stdout line callback.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt as _};

use crate::{write_log, CancelToken, CappedLog, LineCallback, MAX_LINE};

/// The last bytes of one output stream, and how much there was in all.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    /// At most the configured number of trailing bytes.
    pub tail: Vec<u8>,
    /// Total bytes the stream produced.
    pub total_bytes: u64,
}

impl Captured {
    /// Whether bytes were dropped from the front.
    pub fn truncated(&self) -> bool {
        self.total_bytes > self.tail.len() as u64
    }

    /// The tail decoded as UTF-8, invalid sequences replaced.
    pub fn text_lossy(&self) -> String {
        String::from_utf8_lossy(&self.tail).into_owned()
    }
}

/// The last `max` bytes of `s`, cut on a character boundary.
pub(crate) fn tail_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Reads `pipe` to its end (or until `drain` fires), logging every chunk,
/// keeping the tail and feeding lines.
pub(crate) async fn pump<R: AsyncRead + Unpin>(
    mut pipe: R,
    tail_bytes: usize,
    log: Option<Arc<Mutex<CappedLog>>>,
    on_line: Option<LineCallback>,
    drain: CancelToken,
) -> Captured {
    let mut tail: VecDeque<u8> = VecDeque::with_capacity(tail_bytes.min(64 * 1024));
    let mut total = 0u64;
    let mut line: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let read = tokio::select! {
            read = pipe.read(&mut buf) => read,
            _ = drain.cancelled() => break,
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        total += n as u64;
        write_log(&log, chunk);
        tail.extend(chunk);
        if tail.len() > tail_bytes {
            let excess = tail.len() - tail_bytes;
            tail.drain(..excess);
        }
        if let Some(cb) = &on_line {
            let mut rest = chunk;
            while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
                line.extend_from_slice(&rest[..pos]);
                cb(strip_cr(&line));
                line.clear();
                rest = &rest[pos + 1..];
            }
            line.extend_from_slice(rest);
            if line.len() > MAX_LINE {
                cb(&line);
                line.clear();
            }
        }
    }
    if let Some(cb) = &on_line {
        if !line.is_empty() {
            cb(strip_cr(&line));
        }
    }
    Captured {
        tail: tail.into_iter().collect(),
        total_bytes: total,
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}
