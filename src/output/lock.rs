//! The run-directory lock: one vpm process at a time writes into a run directory.
//!
//! [`RunLock::acquire`] takes an exclusive advisory lock (`flock` on Unix, `LockFileEx` on
//! Windows) on `<run_dir>/.vpm.lock`. The operating system releases it when the holder exits,
//! however it exits, so a crashed run never leaves a stale lock behind. Such locks belong to
//! an *open file description*: a second `open` of the file, even in the same process, does
//! not share the first one's lock, so a second [`RunLock::acquire`] of the same directory
//! fails while the first [`RunLock`] lives.
//!
//! On a file system without advisory locks the lock is skipped with a warning.
//!
//! The holder writes who it is (pid, host, purpose, UTC start time) into the file, as JSON, so
//! that the refusal can name it. The file itself is never removed: deleting it while another
//! process has it open would let a third process lock a new file of the same name.

// `File::try_lock` and friends are std since Rust 1.89 (the workspace's rust-version).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::OutputError;

/// Name of the lock file inside the run directory.
pub const LOCK_FILE: &str = ".vpm.lock";

/// Who holds a run directory, as written into [`LOCK_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockHolder {
    /// Process id of the holder.
    pub pid: u32,
    /// Host name of the holder's machine, when known.
    pub host: Option<String>,
    /// What the holder is doing, e.g. `"vpm run"` or `"vpm resume"`.
    pub purpose: String,
    /// When it took the lock, UTC ISO-8601.
    pub since: String,
}

impl LockHolder {
    fn this_process(purpose: &str) -> LockHolder {
        LockHolder {
            pid: std::process::id(),
            host: host_name(),
            purpose: purpose.to_string(),
            since: super::utc_now_iso8601(),
        }
    }
}

impl std::fmt::Display for LockHolder {
    /// `vpm resume (pid 1234 on host-a, since 2025-03-01T12:34:56Z)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {}", self.purpose, self.pid)?;
        if let Some(host) = &self.host {
            write!(f, " on {host}")?;
        }
        write!(f, ", since {})", self.since)
    }
}

/// The machine's host name, if the system tells it cheaply.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// An exclusive lock on a run directory, held until dropped (or the process ends).
#[derive(Debug)]
pub struct RunLock {
    file: File,
    path: PathBuf,
}

impl RunLock {
    /// Lock `run_dir` (which must exist) for `purpose` (e.g. `"vpm run"`, `"vpm resume"`).
    /// Creates `<run_dir>/.vpm.lock` if needed, takes the lock without waiting, and writes
    /// this process's [`LockHolder`] into it.
    ///
    /// Fails with [`OutputError::RunDirInUse`], naming the holder and the directory, when
    /// another process (or another `RunLock` in this one) holds the lock.
    pub fn acquire(run_dir: &Path, purpose: &str) -> Result<RunLock, OutputError> {
        let path = run_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| OutputError::io("open lock file", &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let holder = match file.read_to_string(&mut text) {
                    Ok(_) => serde_json::from_str::<LockHolder>(&text)
                        .map(|h| h.to_string())
                        .unwrap_or_else(|_| {
                            "another vpm process (it has not written its details yet)".into()
                        }),
                    Err(e) => format!("another process (its details cannot be read: {e})"),
                };
                return Err(OutputError::RunDirInUse {
                    path: run_dir.to_path_buf(),
                    holder,
                });
            }
            // A file system without advisory locks (some network file systems): run unlocked,
            // and say so, rather than refuse every run there.
            Err(TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                tracing::warn!(
                    "{}: the file system does not support file locks ({e}); the run directory \
                     is not protected against a second vpm process",
                    path.display()
                );
            }
            Err(TryLockError::Error(e)) => return Err(OutputError::io("lock", &path, e)),
        }
        let holder = LockHolder::this_process(purpose);
        let text = serde_json::to_string_pretty(&holder).map_err(|e| OutputError::Json {
            op: "serialize",
            path: path.clone(),
            error: e,
        })?;
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(format!("{text}\n").as_bytes()))
            .and_then(|()| file.sync_data())
            .map_err(|e| OutputError::io("write", &path, e))?;
        Ok(RunLock { file, path })
    }

    /// The lock file, `<run_dir>/.vpm.lock`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who holds a run directory's lock now, as its lock file says; `None` when the directory
    /// is not locked (whatever the file says) or has no lock file.
    pub fn holder(run_dir: &Path) -> Option<LockHolder> {
        let path = run_dir.join(LOCK_FILE);
        let mut file = File::open(&path).ok()?;
        // A shared lock succeeds only when no one holds the exclusive one.
        if file.try_lock_shared().is_ok() {
            return None;
        }
        let mut text = String::new();
        file.read_to_string(&mut text).ok()?;
        serde_json::from_str(&text).ok()
    }
}

impl Drop for RunLock {
    /// Empties the lock file (its holder is gone) and releases the lock; the file stays.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_names_the_holder_and_drop_releases() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let lock = RunLock::acquire(dir, "vpm resume").unwrap();
        assert_eq!(lock.path(), dir.join(LOCK_FILE));
        let holder = RunLock::holder(dir).expect("held");
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.purpose, "vpm resume");
        assert_eq!(holder.since.len(), 20);

        let err = RunLock::acquire(dir, "vpm run").unwrap_err();
        assert!(matches!(err, OutputError::RunDirInUse { .. }), "{err:?}");
        let msg = err.to_string();
        for part in [
            dir.display().to_string(),
            format!("is in use by vpm resume (pid {}", std::process::id()),
            format!("since {}", holder.since),
            "wait for it or stop it".to_string(),
        ] {
            assert!(msg.contains(&part), "{part:?} not in {msg}");
        }

        drop(lock);
        assert!(dir.join(LOCK_FILE).exists(), "the lock file stays");
        assert_eq!(RunLock::holder(dir), None);
        let again = RunLock::acquire(dir, "vpm run").unwrap();
        assert_eq!(RunLock::holder(dir).unwrap().purpose, "vpm run");
        drop(again);
    }

    /// flock locks belong to the open file description: a handle opened separately (as
    /// another process would) cannot take the lock while a `RunLock` holds it, and can once
    /// it is dropped.
    #[test]
    fn another_open_file_description_is_excluded() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = RunLock::acquire(tmp.path(), "vpm run").unwrap();
        let other = File::open(tmp.path().join(LOCK_FILE)).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        assert!(matches!(
            other.try_lock_shared(),
            Err(TryLockError::WouldBlock)
        ));
        drop(lock);
        other.try_lock().unwrap();
        // Held by that handle now: acquire is refused, with no details written by the holder.
        let msg = RunLock::acquire(tmp.path(), "vpm run")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("has not written its details yet"), "{msg}");
        drop(other);
        RunLock::acquire(tmp.path(), "vpm run").unwrap();
    }

    /// A child process holding the lock (`flock(1)` from util-linux) keeps vpm out until it
    /// exits; skipped where `flock` is not installed.
    #[test]
    fn a_child_process_holding_the_lock_keeps_us_out() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(LOCK_FILE);
        std::fs::write(&path, "").unwrap();
        let child = std::process::Command::new("flock")
            // --close: the lock stays with flock itself, not with `sleep`, so killing flock
            // ends the holder.
            .args(["--exclusive", "--close"])
            .arg(&path)
            .args(["sleep", "10"])
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("flock(1) not available; skipping");
            return;
        };
        // Wait until the child holds it.
        let mut held = false;
        for _ in 0..200 {
            if RunLock::acquire(tmp.path(), "vpm run").is_err() {
                held = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(held, "the child never held the lock");
        // The OS releases it once every copy of the locked descriptor is closed: flock's is
        // gone with flock, and its forked child closes its copy (--close) just before it
        // execs `sleep`, which on a busy machine may come a moment later.
        let mut last = None;
        for _ in 0..500 {
            match RunLock::acquire(tmp.path(), "vpm run") {
                Ok(_) => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("still locked after the holder died: {last:?}");
    }

    #[test]
    fn missing_directory_is_an_io_error_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let err = RunLock::acquire(&tmp.path().join("absent"), "vpm run").unwrap_err();
        assert!(err.to_string().contains(LOCK_FILE), "{err}");
    }
}
