//! Writing to stdout and stderr: a failed write never panics and never goes
//! unnoticed.
//!
//! `outln!` panics when it cannot write (a full disk, a closed pipe), and
//! printing that panic to a stderr that cannot be written either aborted the
//! process. Everything the binary prints goes through here instead: the
//! [`outln!`]/[`errln!`] macros and the [`stdout`]/[`stderr`] writers. The
//! first failure of a stream is recorded; later writes to it are skipped; a
//! running command is asked to stop (like a first Ctrl-C: agents stopped,
//! state saved); and `main` ends the process with [`exit_code`]: 141 for a
//! closed pipe (what a shell reports for a command SIGPIPE ended, without a
//! message: the reader went away on purpose, `cascade status | head -1`),
//! 1 with a message on stderr (when stderr still works) for anything else.

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Exit code when the reader of stdout (or stderr) went away: 128 + SIGPIPE.
pub const EXIT_CLOSED_PIPE: u8 = 141;

/// One of the two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn broken_flag(self) -> &'static AtomicBool {
        static OUT: AtomicBool = AtomicBool::new(false);
        static ERR: AtomicBool = AtomicBool::new(false);
        match self {
            Stream::Stdout => &OUT,
            Stream::Stderr => &ERR,
        }
    }

    /// Whether a write to this stream failed already.
    pub fn broken(self) -> bool {
        self.broken_flag().load(Ordering::SeqCst)
    }
}

/// The first output failure of the process.
#[derive(Debug, Clone)]
struct Failed {
    stream: Stream,
    kind: ErrorKind,
    message: String,
}

static FIRST: Mutex<Option<Failed>> = Mutex::new(None);

/// Records a failed write (the first per stream counts) and asks a running
/// command to stop.
fn record(stream: Stream, e: &std::io::Error) {
    if stream.broken_flag().swap(true, Ordering::SeqCst) {
        return;
    }
    let mut first = FIRST.lock().unwrap_or_else(|p| p.into_inner());
    if first.is_none() {
        *first = Some(Failed {
            stream,
            kind: e.kind(),
            message: e.to_string(),
        });
    }
    drop(first);
    super::signals::stop_for_output();
}

/// Writes `bytes` to `stream` and flushes; a failure is recorded (see the
/// module doc) and returned. Nothing is written to a stream that failed.
fn write_all(stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
    if stream.broken() {
        return Err(std::io::Error::new(
            ErrorKind::BrokenPipe,
            format!("{} cannot be written", stream.name()),
        ));
    }
    let result = match stream {
        Stream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
        Stream::Stderr => {
            let mut err = std::io::stderr().lock();
            err.write_all(bytes).and_then(|()| err.flush())
        }
    };
    if let Err(e) = &result {
        record(stream, e);
    }
    result
}

/// Prints formatted text to `stream` (what the macros expand to).
pub fn print(stream: Stream, args: std::fmt::Arguments<'_>) {
    let text = match args.as_str() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(args.to_string()),
    };
    let _ = write_all(stream, text.as_bytes());
}

/// A writer on one stream with the behaviour of the module doc (wrap it in
/// a `BufWriter` for many small writes).
#[derive(Debug, Clone, Copy)]
pub struct Out(Stream);

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_all(self.0, buf).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // Every write is flushed already.
        Ok(())
    }
}

/// A writer on stdout.
pub fn stdout() -> Out {
    Out(Stream::Stdout)
}

/// A writer on stderr.
pub fn stderr() -> Out {
    Out(Stream::Stderr)
}

/// The exit code of a command that returned `code`, given the output
/// failures: a command that succeeded, or stopped only because its output
/// failed (`stopped_by_output`), ends with the failure's code; one that
/// failed on its own keeps its code. Prints what failed on stderr when it
/// can, except for a closed pipe.
pub fn exit_code(code: u8, stopped_by_output: bool) -> u8 {
    let Some(f) = FIRST.lock().ok().and_then(|f| f.clone()) else {
        return code;
    };
    let closed = f.kind == ErrorKind::BrokenPipe;
    if !closed && !Stream::Stderr.broken() {
        print(
            Stream::Stderr,
            format_args!(
                "error: cannot write to {}: {}; free space on its disk or send it elsewhere\n",
                f.stream.name(),
                f.message
            ),
        );
    }
    if code != 0 && !stopped_by_output {
        return code;
    }
    if closed {
        EXIT_CLOSED_PIPE
    } else {
        super::EXIT_FAILED
    }
}

// The macros are in scope in every module of `cli` declared after this one
// (`#[macro_use]`) and in `main`.

/// `outln!` that never panics: see the module doc.
macro_rules! outln {
    () => {
        $crate::cli::out::print($crate::cli::out::Stream::Stdout, format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::print(
            $crate::cli::out::Stream::Stdout,
            format_args!("{}\n", format_args!($($arg)*)),
        )
    };
}

/// `print!` that never panics.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::print($crate::cli::out::Stream::Stdout, format_args!($($arg)*))
    };
}

/// `errln!` that never panics.
macro_rules! errln {
    () => {
        $crate::cli::out::print($crate::cli::out::Stream::Stderr, format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::print(
            $crate::cli::out::Stream::Stderr,
            format_args!("{}\n", format_args!($($arg)*)),
        )
    };
}

/// `eprint!` that never panics.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::cli::out::print($crate::cli::out::Stream::Stderr, format_args!($($arg)*))
    };
}
