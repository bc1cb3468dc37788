//! Console output that never panics: what vpm writes to stdout and stderr for people.
//!
//! Rust's `println!` and `eprintln!` panic when the stream is a closed pipe (`EPIPE`: Rust
//! ignores `SIGPIPE`) or a full device (`/dev/full`). Here a failed write instead marks its
//! stream broken for the rest of the process: later writes to it are dropped, and the program
//! goes on. A run whose log pipe is closed (`vpm run X 2>&1 | head`) thus finishes and writes
//! its outputs; a command whose stdout is its product (`vpm cases`, `vpm check`) asks
//! [`stdout_error`] at the end and fails with one line ([`report_stdout_error`]).
//!
//! [`out!`](crate::out) writes a line to stdout, [`say!`](crate::say) a line to stderr;
//! [`StderrLog`] is the writer of the tracing log. [`Short`] spells a number briefly.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// One of the two console streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output: what a command produces (tables, resolved cases, paths).
    Out,
    /// Standard error: messages, progress and the log.
    Err,
}

/// Per stream: set by the first failed write, after which nothing more is written to it.
static BROKEN: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
/// Per stream: the first write error, for the closing report.
static FIRST_ERROR: [OnceLock<io::Error>; 2] = [OnceLock::new(), OnceLock::new()];

impl Stream {
    fn index(self) -> usize {
        match self {
            Stream::Out => 0,
            Stream::Err => 1,
        }
    }

    /// Whether a write to this stream has failed (and later ones are dropped).
    pub fn is_broken(self) -> bool {
        BROKEN[self.index()].load(Ordering::Relaxed)
    }

    /// Records `error` as this stream's failure: the stream is written no more.
    fn fail(self, error: io::Error) {
        let _ = FIRST_ERROR[self.index()].set(error);
        BROKEN[self.index()].store(true, Ordering::Relaxed);
    }

    /// Runs `op` on the locked stream unless it is broken; a failure breaks it.
    fn attempt(self, op: impl FnOnce(&mut dyn Write) -> io::Result<()>) {
        if self.is_broken() {
            return;
        }
        let result = match self {
            Stream::Out => op(&mut io::stdout().lock()),
            Stream::Err => op(&mut io::stderr().lock()),
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }
}

/// Writes `args` to `stream` (no newline added); a failure marks the stream broken instead of
/// panicking. What [`out!`](crate::out) and [`say!`](crate::say) call.
pub fn write(stream: Stream, args: fmt::Arguments<'_>) {
    stream.attempt(|w| w.write_fmt(args));
}

/// Flushes stdout (it is line-buffered), recording a failure like a failed write.
pub fn flush_stdout() {
    Stream::Out.attempt(|w| w.flush());
}

/// The first error writing to stdout, if any: flushes stdout first.
pub fn stdout_error() -> Option<&'static io::Error> {
    flush_stdout();
    FIRST_ERROR[Stream::Out.index()].get()
}

/// The closing report of a command whose output could not be written: the one line
/// `error: cannot write to standard output: REASON` on stderr, or nothing when the reader went
/// away (a closed pipe: the reader wanted no more, as `vpm cases | head -1`). Returns whether
/// stdout failed, i.e. whether the command must exit with a failure status.
pub fn report_stdout_error() -> bool {
    match stdout_error() {
        None => false,
        Some(e) => {
            if e.kind() != io::ErrorKind::BrokenPipe {
                crate::say!("error: cannot write to standard output: {e}");
            }
            true
        }
    }
}

/// Writes a line to stdout without ever panicking (see the [module docs](self)).
#[macro_export]
macro_rules! out {
    () => {
        $crate::console::write($crate::console::Stream::Out, format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::console::write(
            $crate::console::Stream::Out,
            format_args!("{}\n", format_args!($($arg)*)),
        )
    };
}

/// Writes a line to stderr without ever panicking (see the [module docs](self)).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::write(
            $crate::console::Stream::Err,
            format_args!("{}\n", format_args!($($arg)*)),
        )
    };
}

/// stderr for the tracing log (`tracing_subscriber`'s `with_writer(StderrLog)`): a failed write
/// breaks [`Stream::Err`] and is reported to the log as a success, so the log never retries,
/// complains or panics.
#[derive(Debug, Clone, Copy, Default)]
pub struct StderrLog;

impl Write for StderrLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Stream::Err.attempt(|w| w.write_all(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for StderrLog {
    type Writer = StderrLog;

    fn make_writer(&'a self) -> StderrLog {
        StderrLog
    }
}

/// A number spelled briefly for people: the shortest text that reads back to the same `f64`,
/// in exponent form outside [1e-5, 1e16) (`1e-300`, not 300 zeros). A precision is kept:
/// `{:.4}` gives `0.5000`, or `1.0000e20` for a huge value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Short(pub f64);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        let plain = x == 0.0 || !x.is_finite() || (1e-5..1e16).contains(&x.abs());
        match (plain, f.precision()) {
            (true, _) => fmt::Display::fmt(&x, f),
            (false, Some(p)) => write!(f, "{x:.p$e}"),
            (false, None) => write!(f, "{x:e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Short;

    #[test]
    fn short_numbers_are_short_and_exact() {
        for (x, s) in [
            (0.5, "0.5"),
            (0.02, "0.02"),
            (20.0, "20"),
            (1e-5, "0.00001"),
            (1e-300, "1e-300"),
            (1e300, "1e300"),
            (-2.5e20, "-2.5e20"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(Short(x).to_string(), s);
            assert_eq!(s.parse::<f64>().unwrap(), x);
        }
        assert_eq!(format!("{:.4}", Short(0.5)), "0.5000");
        assert_eq!(format!("{:.4}", Short(1e300)), "1.0000e300");
        let third = 1.0 / 3.0;
        assert_eq!(
            Short(third * 1e-20).to_string().parse::<f64>().unwrap(),
            third * 1e-20
        );
    }
}
