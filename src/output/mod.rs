//! Everything that touches the run directory on disk.
//!
//! Principles:
//! * nothing is lost: a run never silently overwrites an earlier run, and logs
//!   are append-only;
//! * outputs are written atomically (temporary file or directory in the same
//!   directory, fsync, rename, fsync of the directory);
//! * I/O never panics: every failure is an [`OutputError`] naming the path and
//!   what went wrong.
//!
//! Layout of a run directory (names used by the rest of vpm):
//! `case.toml`, `manifest.json`, `energy.png`, `spectrum.png`, `spectral/`,
//! `vortex/`, `checkpoints/`, `snapshots/`, `fields/`, `comparison.csv`, the structures and
//! vorticity pictures, and the lock file
//! `.vpm.lock` of the process writing into it ([`RunLock`]).

pub mod bodies;
mod checkpoint;
mod csv;
mod fields;
mod lock;
mod manifest;
mod npz;
mod run_dir;
pub mod snapshot;
mod time;
mod vtk;

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

pub use checkpoint::{
    checkpoint_meta_path, read_latest_checkpoint, read_latest_checkpoint_as, write_checkpoint,
    CheckpointArrays, CHECKPOINTS_DIR,
};
pub use csv::CsvLog;
pub use fields::{fields_disk_bytes, write_fields, FieldPrecision, FieldsFrame, FIELD_X};
pub use lock::{LockHolder, RunLock, LOCK_FILE};
pub use manifest::{
    check_run_dir_format, cpu_model, CflSteps, EnergyConservation, Manifest, NumericalDissipation,
    RankRecord, ResumeRecord, MANIFEST_FILE, OLDEST_RUN_DIR_FORMAT, RUN_DIR_FORMAT,
};
pub use npz::{read_field_time, read_velocity_npz, write_velocity_npz, FieldTime, VelocityField};
pub use run_dir::{create_locked_run_dir, create_run_dir, ForceCleanup};
pub use snapshot::{
    read_particle_snapshot, snapshot_disk_bytes, write_particle_snapshot, OwnedParticleSnapshot,
    ParticleSnapshot, PARTICLES_PVD, SNAPSHOTS_DIR,
};
pub use time::{utc_now_compact, utc_now_iso8601};

/// Errors from the output layer. Every variant's message names the path involved.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// An operating-system I/O operation failed.
    #[error("cannot {op} {}: {error}", .path.display())]
    Io {
        /// What was being attempted ("create", "write", "fsync", ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        error: io::Error,
    },
    /// Renaming `from` to `to` failed.
    #[error("cannot rename {} to {}: {error}", .from.display(), .to.display())]
    Rename {
        /// Source path.
        from: PathBuf,
        /// Destination path.
        to: PathBuf,
        /// The underlying error.
        error: io::Error,
    },
    /// The run directory exists, is not empty, and `--force` was not given.
    #[error(
        "run directory {} already exists and is not empty; use --force to replace vpm's outputs in it, or choose another --out",
        .path.display()
    )]
    RunDirNotEmpty {
        /// The directory that was refused.
        path: PathBuf,
    },
    /// Another process (or another [`RunLock`] of this one) holds the run directory's lock.
    #[error(
        "run directory {} is in use by {holder}; wait for it or stop it",
        .path.display()
    )]
    RunDirInUse {
        /// The locked run directory.
        path: PathBuf,
        /// Who holds it, e.g. `vpm resume (pid 1234 on host-a, since 2025-03-01T12:34:56Z)`.
        holder: String,
    },
    /// A run directory written in a format this vpm does not resume
    /// ([`RUN_DIR_FORMAT`]).
    #[error(
        "{}: this run directory has format {found}; this vpm reads format {}: {}",
        .path.display(), RUN_DIR_FORMAT, manifest::format_advice(*.found)
    )]
    RunDirFormat {
        /// The file that carries the format (`manifest.json`, a checkpoint's `meta.json`).
        path: PathBuf,
        /// The format found there.
        found: u32,
    },
    /// A path that should be a directory is something else.
    #[error("{} exists and is not a directory", .path.display())]
    NotADirectory {
        /// The offending path.
        path: PathBuf,
    },
    /// A file that must be new already exists (vpm never overwrites it silently).
    #[error("{} already exists; refusing to overwrite it", .path.display())]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// JSON (de)serialization failed.
    #[error("cannot {op} JSON {}: {error}", .path.display())]
    Json {
        /// "parse" or "serialize".
        op: &'static str,
        /// The JSON file.
        path: PathBuf,
        /// The underlying error.
        error: serde_json::Error,
    },
    /// Writing or reading an `.npz` archive failed.
    #[error("cannot {op} npz {}: {}", .path.display(), with_causes(.error.as_ref()))]
    Npz {
        /// "write" or "read".
        op: &'static str,
        /// The `.npz` file.
        path: PathBuf,
        /// The underlying error (from ndarray-npy / zip).
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The header line of an existing CSV log is not the expected one.
    #[error("CSV header of {} does not match: expected {expected:?}, found {found:?}", .path.display())]
    CsvHeaderMismatch {
        /// The CSV file.
        path: PathBuf,
        /// Expected header line (without newline).
        expected: String,
        /// Header line found in the file (without newline).
        found: String,
    },
    /// Data given to, or found by, the output layer is inconsistent.
    #[error("invalid data for {}: {msg}", .path.display())]
    Invalid {
        /// The file or directory concerned.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

/// `error` and the causes under it that its text does not already give, joined by ": ". zip's
/// error says only "i/o error" and keeps the reason ("No space left on device (os error 28)")
/// as its cause.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

impl OutputError {
    pub(crate) fn io(op: &'static str, path: &Path, error: io::Error) -> OutputError {
        OutputError::Io {
            op,
            path: path.to_path_buf(),
            error,
        }
    }

    pub(crate) fn invalid(path: &Path, msg: impl Into<String>) -> OutputError {
        OutputError::Invalid {
            path: path.to_path_buf(),
            msg: msg.into(),
        }
    }
}

/// Round-trip exact float formatting for CSV/JSON text: `{:.16e}` style
/// (17 significant digits, e.g. `1.2500000000000000e-1`), which parses back
/// bit-exactly (negative zero and subnormals included).
/// NaN → `"nan"`, +∞ → `"inf"`, −∞ → `"-inf"` (all accepted by Rust's
/// `str::parse::<f64>` and by Python's `float`).
pub fn format_f64(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{x:.16e}")
    }
}

/// The parent directory of `path` for the purpose of creating siblings
/// (`"."` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsync a directory so that entries created/renamed in it are durable.
/// Best effort: some file systems refuse to open or sync directories.
pub(crate) fn sync_dir_best_effort(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Temporary sibling used by [`write_atomic`]: `<dir>/.<file>.tmp-<pid>`.
fn temp_sibling(path: &Path) -> Result<PathBuf, OutputError> {
    let name = path
        .file_name()
        .ok_or_else(|| OutputError::invalid(path, "path has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    Ok(parent_dir(path).join(tmp_name))
}

/// Fill the open `file` (at `path`, named in errors) through a buffered writer, flush it and
/// fsync it; the file is closed on return.
pub(crate) fn fill_and_sync<F>(file: File, path: &Path, fill: F) -> Result<(), OutputError>
where
    F: FnOnce(&mut BufWriter<File>, &Path) -> Result<(), OutputError>,
{
    let mut w = BufWriter::new(file);
    fill(&mut w, path)?;
    let file = w
        .into_inner()
        .map_err(|e| OutputError::io("write", path, e.into_error()))?;
    file.sync_all()
        .map_err(|e| OutputError::io("fsync", path, e))
}

/// The file name whose atomic writes fail ([`fail_writes_of`]); unset in normal runs.
static FAILING_WRITE: std::sync::OnceLock<std::ffi::OsString> = std::sync::OnceLock::new();

/// Testing aid (`vpm run|resume --fail-write NAME`): from now on, every atomic write
/// ([`write_atomic`], [`write_atomic_with`]) of a file called `name` fails as on a full disk
/// (ENOSPC), after creating its temporary file and before renaming it. Set once per process;
/// a second call is ignored.
pub fn fail_writes_of(name: &str) {
    let _ = FAILING_WRITE.set(name.into());
}

/// The injected failure of writing `path` ([`fail_writes_of`]), if its name is the one set.
fn injected_write_failure(path: &Path) -> Option<io::Error> {
    let failing = FAILING_WRITE.get()?;
    (path.file_name() == Some(failing.as_os_str()))
        .then(|| io::Error::from_raw_os_error(libc::ENOSPC))
}

/// Write a file atomically by streaming into a temporary sibling.
///
/// `fill` receives a buffered writer on the temporary file; after it returns
/// `Ok`, the buffer is flushed, the file fsynced and renamed onto `path`, and
/// the directory fsynced (best effort). On any failure the temporary file is
/// removed and `path` is left untouched.
pub(crate) fn write_atomic_with<F>(path: &Path, fill: F) -> Result<(), OutputError>
where
    F: FnOnce(&mut BufWriter<File>, &Path) -> Result<(), OutputError>,
{
    let tmp = temp_sibling(path)?;
    let result = (|| {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| OutputError::io("create temporary file", &tmp, e))?;
        if let Some(e) = injected_write_failure(path) {
            return Err(OutputError::io("write", &tmp, e));
        }
        fill_and_sync(file, &tmp, fill)?;
        fs::rename(&tmp, path).map_err(|e| OutputError::Rename {
            from: tmp.clone(),
            to: path.to_path_buf(),
            error: e,
        })
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    sync_dir_best_effort(parent_dir(path));
    Ok(())
}

/// Write bytes to `path` atomically: temporary file in the same directory
/// (named `.<file>.tmp-<pid>`), write, fsync, rename onto `path`, fsync the
/// directory (best effort). Readers see either the old or the new content,
/// never a mixture. The parent directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_atomic_with(path, |w, tmp| {
        w.write_all(bytes)
            .map_err(|e| OutputError::io("write", tmp, e))
    })
}

/// The git commit vpm was built from, when known: `VPM_GIT_COMMIT` at build time (build.rs
/// sets it from the checkout being built), else `git rev-parse HEAD` run now in the crate's
/// source directory. `None` on any failure.
pub fn git_commit() -> Option<String> {
    if let Some(c) = option_env!("VPM_GIT_COMMIT") {
        let c = c.trim();
        if !c.is_empty() {
            return Some(c.to_string());
        }
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Some(s.to_string())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small deterministic generator (SplitMix64) so tests need no extra crates.
    pub(crate) struct Mix(pub u64);
    impl Mix {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// The sorted entry names of `dir`.
    pub(crate) fn list(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"first").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"first");
        write_atomic(&p, b"second, longer").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second, longer");
        write_atomic(&p, b"x").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"x");
        assert_eq!(list(dir.path()), vec!["a.json".to_string()]);
    }

    #[test]
    fn write_atomic_missing_dir_is_error_naming_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope").join("a.json");
        let err = write_atomic(&p, b"x").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("nope"), "{msg}");
        assert!(list(dir.path()).is_empty());
    }

    #[test]
    fn an_injected_write_failure_is_enospc_and_leaves_the_old_file() {
        // A name no other test writes: the failure is set for the whole test process.
        const NAME: &str = "injected-failure.test";
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(NAME);
        write_atomic(&p, b"before").unwrap();
        fail_writes_of(NAME);
        let err = write_atomic(&p, b"after").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("No space left on device"), "{msg}");
        assert!(msg.contains(NAME), "{msg}");
        assert_eq!(fs::read(&p).unwrap(), b"before");
        assert_eq!(list(dir.path()), vec![NAME.to_string()]);
        // Other names are written as ever.
        write_atomic(&dir.path().join("other"), b"x").unwrap();
    }

    #[test]
    fn format_f64_round_trips_bit_exact() {
        let mut rng = Mix(12345);
        let mut specials = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.125,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            5e-324,
            -5e-324,
            2.225_073_858_507_201e-308, // largest subnormal
            0.1,
            1.0 / 3.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for _ in 0..20_000 {
            // random bit patterns cover all exponents, subnormals and signs
            specials.push(f64::from_bits(rng.next()));
            // and random subnormals explicitly
            let sub = f64::from_bits(rng.next() & 0x800F_FFFF_FFFF_FFFF);
            specials.push(sub);
        }
        for x in specials {
            let s = format_f64(x);
            let y: f64 = s.parse().unwrap();
            if x.is_nan() {
                assert_eq!(s, "nan");
                assert!(y.is_nan());
            } else {
                assert_eq!(x.to_bits(), y.to_bits(), "{x:e} -> {s}");
            }
        }
        assert_eq!(format_f64(0.125), "1.2500000000000000e-1");
        assert_eq!(format_f64(f64::INFINITY), "inf");
        assert_eq!(format_f64(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_f64(f64::NAN), "nan");
    }

    #[test]
    fn git_commit_does_not_panic() {
        if let Some(c) = git_commit() {
            assert!(!c.is_empty());
        }
    }
}
