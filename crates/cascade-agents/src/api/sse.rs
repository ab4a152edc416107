//! Server-sent events, as both model APIs stream them: `event:` and
//! `data:` lines, an empty line ending each event, `:` comments ignored.
//! Bytes go in as the network delivers them (an event may be split across
//! chunks anywhere, even inside a UTF-8 character); whole events come out.

/// One event: its `event:` name (empty when none was given) and its data
/// lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub data: String,
}

/// A line longer than this is not an SSE stream.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// A line grew past [`MAX_LINE`]: the stream is not server-sent events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a stream line without end")]
pub struct LineTooLong {
    /// The line's first bytes, to show.
    pub start: String,
}

/// The incremental decoder.
#[derive(Debug, Default)]
pub struct Decoder {
    line: Vec<u8>,
    name: String,
    data: Vec<String>,
    /// Whether any field was seen since the last dispatch.
    open: bool,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Feeds a chunk; returns the events it completed, or an error when a
    /// line grows past any sensible size.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Event>, LineTooLong> {
        let mut events = Vec::new();
        for &b in chunk {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if let Some(e) = self.line_done(&line) {
                    events.push(e);
                }
            } else {
                self.line.push(b);
                if self.line.len() > MAX_LINE {
                    let start = String::from_utf8_lossy(&self.line[..200]).into_owned();
                    return Err(LineTooLong { start });
                }
            }
        }
        Ok(events)
    }

    /// The event still open when the stream ended (a server that does not
    /// close its last event with an empty line).
    pub fn finish(&mut self) -> Option<Event> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            if let Some(e) = self.line_done(&line) {
                return Some(e);
            }
        }
        self.dispatch()
    }

    fn line_done(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(b":") {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => {
                self.name = value.to_string();
                self.open = true;
            }
            "data" => {
                self.data.push(value.to_string());
                self.open = true;
            }
            // `id`, `retry` and unknown fields say nothing we use.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<Event> {
        if !self.open {
            return None;
        }
        self.open = false;
        Some(Event {
            name: std::mem::take(&mut self.name),
            data: std::mem::take(&mut self.data).join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<Event> {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.feed(c).unwrap());
        }
        out.extend(d.finish());
        out
    }

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let text = "event: message_start\ndata: {\"a\": 1}\n\n: keep-alive\n\nevent: ping\r\ndata: {}\r\n\r\ndata: [DONE]\n\n";
        let whole = all(&[text.as_bytes()]);
        assert_eq!(
            whole,
            vec![
                Event {
                    name: "message_start".into(),
                    data: "{\"a\": 1}".into()
                },
                Event {
                    name: "ping".into(),
                    data: "{}".into()
                },
                Event {
                    name: String::new(),
                    data: "[DONE]".into()
                },
            ]
        );
        // Byte by byte gives the same events.
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(all(&bytes), whole);
    }

    #[test]
    fn multi_line_data_and_an_unterminated_last_event() {
        let e = all(&[b"data: one\ndata: two\n\ndata: last"]);
        assert_eq!(e[0].data, "one\ntwo");
        assert_eq!(e[1].data, "last");
    }

    #[test]
    fn a_character_split_between_chunks_survives() {
        let text = "data: {\"t\": \"héllo\"}\n\n".as_bytes();
        let at = text.iter().position(|b| *b == 0xc3).unwrap() + 1;
        let e = all(&[&text[..at], &text[at..]]);
        assert_eq!(e[0].data, "{\"t\": \"héllo\"}");
    }
}
