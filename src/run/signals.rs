//! SIGINT and SIGTERM: the first asks the run to stop after the step in progress, with a
//! checkpoint, and is acknowledged at once on stderr; a second one, a second or more later, ends
//! the process.

use crate::run::options::ProgressStyle;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

fn stop_flag() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// How long after the first signal a second one ends the process at once. Shorter gaps are one
/// request delivered twice: coreutils `timeout` (without `--foreground`) sends its signal to the
/// child and then to its whole process group, and a run stopped that way lost its checkpoint
/// when the copy arrived as a separate signal.
const SECOND_SIGNAL_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The step the run is computing or writing the outputs of (0 before the first step of this
/// process), for the acknowledgement of a signal.
static STEP_IN_PROGRESS: AtomicU64 = AtomicU64::new(0);

/// Records the step the run is now computing ([`STEP_IN_PROGRESS`]).
pub(crate) fn set_step_in_progress(step: u64) {
    STEP_IN_PROGRESS.store(step, Ordering::Relaxed);
}

/// Sends this process SIGINT, as a Ctrl-C would ([`crate::run::options::RunOptions::signal_in_step`]).
pub(crate) fn raise_interrupt() -> Result<()> {
    signal_hook::low_level::raise(signal_hook::consts::SIGINT).context("raising SIGINT")
}

/// Writes `parts` to stderr as one write(2), ignoring errors: what a signal handler may do (no
/// allocation, no lock). At most 256 bytes.
fn write_stderr_from_handler(parts: &[&[u8]]) {
    let mut buf = [0u8; 256];
    let mut len = 0;
    for part in parts {
        let n = part.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&part[..n]);
        len += n;
    }
    // SAFETY: write(2) of `len` initialised bytes of `buf` to fd 2; it is async-signal-safe.
    let _ = unsafe { libc::write(2, buf.as_ptr().cast(), len) };
}

/// The decimal digits of `n`, in the tail of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// The acknowledgement of the first signal on stderr: "vpm: finishing step N, then
/// checkpointing; a second signal 1 s later quits without it" (on a line of its own below a
/// progress bar: `newline`).
fn acknowledge_signal(newline: bool) {
    let step = STEP_IN_PROGRESS.load(Ordering::Relaxed);
    let mut digits = [0u8; 20];
    let lead: &[u8] = if newline { b"\n" } else { b"" };
    let what: [&[u8]; 2] = match step {
        0 => [b"stopping before the next step", b""],
        n => [b"finishing step ", decimal(n, &mut digits)],
    };
    write_stderr_from_handler(&[
        lead,
        b"vpm: ",
        what[0],
        what[1],
        b", then checkpointing; a second signal 1 s later quits without it\n",
    ]);
}

/// Makes SIGINT and SIGTERM ask the run to stop after the step in progress, with a checkpoint,
/// and acknowledge it at once on stderr; a second signal of either kind,
/// [`SECOND_SIGNAL_AFTER`] or more after the first, ends the process at once (exit status 130).
/// `progress` is how the run shows its progress (a bar gets the message on a line below it).
pub fn install_signal_handlers(progress: ProgressStyle) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::time::Instant;
    static BASE: OnceLock<Instant> = OnceLock::new();
    // Nanoseconds after BASE of the first signal, plus one; 0 before any.
    static FIRST: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(Instant::now);
    for sig in [SIGINT, SIGTERM] {
        let flag = Arc::clone(stop_flag());
        let handler = move || {
            // Instant::now (clock_gettime) and atomics are async-signal-safe.
            let now = base.elapsed().as_nanos() as u64 + 1;
            match FIRST.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    flag.store(true, Ordering::SeqCst);
                    acknowledge_signal(progress == ProgressStyle::Bar);
                }
                Err(first) => {
                    if now.saturating_sub(first) >= SECOND_SIGNAL_AFTER.as_nanos() as u64 {
                        write_stderr_from_handler(&[
                            b"vpm: a second signal: quitting without a checkpoint\n",
                        ]);
                        signal_hook::low_level::exit(130);
                    }
                }
            }
        };
        // SAFETY: the handler only reads the monotonic clock, updates atomics, writes a message
        // from a stack buffer with write(2) and calls `_exit` (signal_hook::low_level::exit),
        // all async-signal-safe; it never allocates or locks.
        unsafe { signal_hook::low_level::register(sig, handler) }
            .context("installing the signal handlers")?;
    }
    Ok(())
}

/// Whether a stop was asked for by a signal.
pub fn interrupted() -> bool {
    stop_flag().load(Ordering::Relaxed)
}
