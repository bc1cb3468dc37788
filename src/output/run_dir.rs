//! Choosing and creating the run directory.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{sync_dir_best_effort, OutputError, RunLock, LOCK_FILE};

/// The entries of a run directory that vpm writes. With `--force`, exactly
/// these are removed from an existing directory; anything else is left alone (the lock
/// file [`LOCK_FILE`] too: it is never removed, and alone it does not make a directory
/// non-empty).
pub const VPM_OUTPUTS: &[&str] = &[
    "case.toml",
    "manifest.json",
    "energy.png",
    "spectrum.png",
    "spectral",
    "vortex",
    "checkpoints",
    "snapshots",
    "comparison.csv",
];

/// Choose and create the run directory, and lock it ([`RunLock`]) for `purpose` (e.g.
/// `"vpm run"`) before anything in it is checked or removed: as [`create_run_dir`], but a
/// directory another vpm process is writing into is refused with
/// [`OutputError::RunDirInUse`] (with `--force` too) instead of having its outputs removed.
/// The lock file `.vpm.lock` does not make a directory non-empty, and `--force` leaves it.
pub fn create_locked_run_dir(
    case_name: &str,
    out: Option<&Path>,
    force: bool,
    purpose: &str,
) -> Result<(PathBuf, RunLock), OutputError> {
    match out {
        Some(dir) => {
            ensure_dir(dir)?;
            let lock = RunLock::acquire(dir, purpose)?;
            claim(dir, force)?;
            Ok((dir.to_path_buf(), lock))
        }
        None => {
            let dir = create_default_in(Path::new("runs"), case_name, &super::utc_now_compact())?;
            let lock = RunLock::acquire(&dir, purpose)?;
            Ok((dir, lock))
        }
    }
}

/// Choose and create the run directory (without locking it: see [`create_locked_run_dir`]).
///
/// * `out = Some(dir)`: use `dir` (from `--out`), creating it and its parents
///   if needed. An existing empty directory is accepted. An existing non-empty
///   directory is refused with [`OutputError::RunDirNotEmpty`] unless `force`;
///   with `force`, the entries vpm writes ([`VPM_OUTPUTS`]) are removed and
///   every other file is left alone.
/// * `out = None`: create `runs/<case_name>-<UTC YYYYMMDDTHHMMSSZ>` relative to
///   the current directory; if that exists, `-2`, `-3`, ... is appended. The
///   directory is claimed with a non-recursive `create_dir`, so two runs started
///   in the same second (even concurrently) never share a directory. Characters
///   of `case_name` other than ASCII letters, digits, `-`, `_` and `.` are
///   replaced by `_`.
///
/// Returns the path of the run directory (relative if `runs/` was used).
pub fn create_run_dir(
    case_name: &str,
    out: Option<&Path>,
    force: bool,
) -> Result<PathBuf, OutputError> {
    match out {
        Some(dir) => prepare_explicit(dir, force),
        None => create_default_in(Path::new("runs"), case_name, &super::utc_now_compact()),
    }
}

/// A file-name-safe version of the case name.
fn sanitize(case_name: &str) -> String {
    let s: String = case_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // never "", "." or ".." (or a hidden name)
    let s = s.trim_start_matches('.').to_string();
    if s.is_empty() {
        "run".to_string()
    } else {
        s
    }
}

/// Create `<base>/<case>-<stamp>[-k]`, the first of these names that does not exist.
pub(crate) fn create_default_in(
    base: &Path,
    case_name: &str,
    stamp: &str,
) -> Result<PathBuf, OutputError> {
    fs::create_dir_all(base).map_err(|e| OutputError::io("create directory", base, e))?;
    let stem = format!("{}-{}", sanitize(case_name), stamp);
    const MAX_TRIES: u32 = 100_000;
    for k in 1..=MAX_TRIES {
        let name = if k == 1 {
            stem.clone()
        } else {
            format!("{stem}-{k}")
        };
        let dir = base.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {
                sync_dir_best_effort(base);
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(OutputError::io("create run directory", &dir, e)),
        }
    }
    Err(OutputError::invalid(
        &base.join(&stem),
        format!("{MAX_TRIES} run directories with this name already exist"),
    ))
}

fn prepare_explicit(dir: &Path, force: bool) -> Result<PathBuf, OutputError> {
    ensure_dir(dir)?;
    claim(dir, force)?;
    Ok(dir.to_path_buf())
}

/// Create `dir` (and its parents) if it does not exist; refuse a non-directory.
fn ensure_dir(dir: &Path) -> Result<(), OutputError> {
    match fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(OutputError::NotADirectory {
            path: dir.to_path_buf(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|e| OutputError::io("create run directory", dir, e))?;
            sync_dir_best_effort(super::parent_dir(dir));
            Ok(())
        }
        Err(e) => Err(OutputError::io("inspect", dir, e)),
    }
}

/// Accept the existing directory `dir` as a run directory: empty (a lock file alone counts as
/// empty), or with `force`, after removing vpm's earlier outputs.
fn claim(dir: &Path, force: bool) -> Result<(), OutputError> {
    let entries = fs::read_dir(dir).map_err(|e| OutputError::io("list directory", dir, e))?;
    let mut non_empty = false;
    for entry in entries {
        let entry = entry.map_err(|e| OutputError::io("list directory", dir, e))?;
        if entry.file_name() != LOCK_FILE {
            non_empty = true;
            break;
        }
    }
    if non_empty {
        if !force {
            return Err(OutputError::RunDirNotEmpty {
                path: dir.to_path_buf(),
            });
        }
        remove_vpm_outputs(dir)?;
    }
    Ok(())
}

/// Remove the entries of [`VPM_OUTPUTS`] from `dir` (symbolic links are
/// removed themselves, never followed).
fn remove_vpm_outputs(dir: &Path) -> Result<(), OutputError> {
    for name in VPM_OUTPUTS {
        let p = dir.join(name);
        let meta = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(OutputError::io("inspect", &p, e)),
        };
        let res = if meta.is_dir() {
            fs::remove_dir_all(&p)
        } else {
            fs::remove_file(&p)
        };
        res.map_err(|e| OutputError::io("remove earlier output", &p, e))?;
        tracing::info!("--force: removed earlier output {}", p.display());
    }
    sync_dir_best_effort(dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::list;
    use super::*;

    /// A new directory `parent/name` holding the files `files`, each with `text`.
    fn dir_with(parent: &Path, name: &str, files: &[&str], text: &str) -> PathBuf {
        let dir = parent.join(name);
        fs::create_dir(&dir).unwrap();
        for file in files {
            fs::write(dir.join(file), text).unwrap();
        }
        dir
    }

    #[test]
    fn refuses_non_empty_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_with(tmp.path(), "run", &["notes.txt"], "mine");
        let err = create_run_dir("tg", Some(&dir), false).unwrap_err();
        assert!(matches!(err, OutputError::RunDirNotEmpty { .. }));
        let msg = err.to_string();
        assert!(msg.contains(&dir.display().to_string()), "{msg}");
        assert!(msg.contains("--force") && msg.contains("--out"), "{msg}");
        assert_eq!(fs::read_to_string(dir.join("notes.txt")).unwrap(), "mine");
    }

    #[test]
    fn accepts_empty_existing_and_creates_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_with(tmp.path(), "empty", &[], "");
        assert_eq!(create_run_dir("tg", Some(&dir), false).unwrap(), dir);
        let nested = tmp.path().join("a").join("b");
        assert_eq!(create_run_dir("tg", Some(&nested), false).unwrap(), nested);
        assert!(nested.is_dir());
    }

    #[test]
    fn refuses_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("file");
        fs::write(&f, "x").unwrap();
        let err = create_run_dir("tg", Some(&f), true).unwrap_err();
        assert!(matches!(err, OutputError::NotADirectory { .. }));
    }

    #[test]
    fn force_removes_only_vpm_outputs() {
        let tmp = tempfile::tempdir().unwrap();
        let outputs = [
            "case.toml",
            "manifest.json",
            "energy.png",
            "spectrum.png",
            "comparison.csv",
        ];
        let dir = dir_with(tmp.path(), "run", &outputs, "old");
        for d in [
            "spectral",
            "vortex",
            "checkpoints/ckpt-0000000010",
            "snapshots",
        ] {
            fs::create_dir_all(dir.join(d)).unwrap();
            fs::write(dir.join(d).join("x.csv"), "old").unwrap();
        }
        fs::write(dir.join("notes.txt"), "keep").unwrap();
        dir_with(&dir, "analysis", &["a.py"], "keep");

        let got = create_run_dir("tg", Some(&dir), true).unwrap();
        assert_eq!(got, dir);
        assert_eq!(list(&dir), ["analysis", "notes.txt"]);
        assert_eq!(
            fs::read_to_string(dir.join("analysis").join("a.py")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn default_names_unique_in_same_second() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        let stamp = "20250101T000000Z";
        let a = create_default_in(&base, "taylor-green", stamp).unwrap();
        let b = create_default_in(&base, "taylor-green", stamp).unwrap();
        let c = create_default_in(&base, "taylor-green", stamp).unwrap();
        assert_eq!(a, base.join("taylor-green-20250101T000000Z"));
        assert_eq!(b, base.join("taylor-green-20250101T000000Z-2"));
        assert_eq!(c, base.join("taylor-green-20250101T000000Z-3"));
        assert!(a.is_dir() && b.is_dir() && c.is_dir());
    }

    #[test]
    fn default_names_use_real_clock_and_are_unique() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("runs");
        let stamp = crate::output::utc_now_compact();
        let a = create_default_in(&base, "ring", &stamp).unwrap();
        let b = create_default_in(&base, "ring", &stamp).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn case_names_are_sanitized() {
        let names = ["taylor-green_2.x", "../evil/name", "", ".."].map(sanitize);
        assert_eq!(names, ["taylor-green_2.x", "_evil_name", "run", "run"]);
    }

    #[test]
    fn lock_file_alone_is_empty_and_survives_force() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_with(tmp.path(), "run", &[LOCK_FILE], "");
        assert_eq!(create_run_dir("tg", Some(&dir), false).unwrap(), dir);
        fs::write(dir.join("case.toml"), "old").unwrap();
        assert!(matches!(
            create_run_dir("tg", Some(&dir), false),
            Err(OutputError::RunDirNotEmpty { .. })
        ));
        create_run_dir("tg", Some(&dir), true).unwrap();
        assert!(dir.join(LOCK_FILE).exists() && !dir.join("case.toml").exists());
    }

    #[test]
    fn locked_run_dir_refuses_a_directory_in_use_even_with_force() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a").join("run");
        let (got, lock) = create_locked_run_dir("tg", Some(&dir), false, "vpm run").unwrap();
        assert_eq!(got, dir);
        fs::write(dir.join("case.toml"), "being written").unwrap();
        let err = create_locked_run_dir("tg", Some(&dir), true, "vpm run").unwrap_err();
        assert!(matches!(err, OutputError::RunDirInUse { .. }), "{err}");
        assert!(err.to_string().contains("vpm run (pid"), "{err}");
        assert_eq!(
            fs::read_to_string(dir.join("case.toml")).unwrap(),
            "being written"
        );
        drop(lock);
        // Free again: the ordinary rules apply.
        assert!(matches!(
            create_locked_run_dir("tg", Some(&dir), false, "vpm run"),
            Err(OutputError::RunDirNotEmpty { .. })
        ));
        let (_, _lock) = create_locked_run_dir("tg", Some(&dir), true, "vpm run").unwrap();
        assert!(!dir.join("case.toml").exists());
    }
}
