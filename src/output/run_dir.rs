//! Choosing and creating the run directory.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use postprocess::layout::{run_entry, RunEntry};

use super::{sync_dir_best_effort, OutputError, RunLock, LOCK_FILE};

/// What `--force` did to an existing run directory: the entries of an earlier run it removed
/// (those of [`postprocess::layout::RUN_ENTRIES`], folders with a trailing `/`) and the other
/// entries it kept (the lock file aside), each sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForceCleanup {
    pub removed: Vec<String>,
    pub kept: Vec<String>,
}

impl ForceCleanup {
    /// The line that tells the user, e.g. `--force: removed checkpoints/, energy.png; kept
    /// notes.txt`; `None` when the directory held nothing but the lock file.
    pub fn summary(&self) -> Option<String> {
        if self.removed.is_empty() && self.kept.is_empty() {
            return None;
        }
        let removed = if self.removed.is_empty() {
            "nothing of an earlier run to remove".to_string()
        } else {
            format!("removed {}", self.removed.join(", "))
        };
        Some(if self.kept.is_empty() {
            format!("--force: {removed}")
        } else {
            format!("--force: {removed}; kept {}", self.kept.join(", "))
        })
    }
}

/// Choose and create the run directory, and lock it ([`RunLock`]) for `purpose` (e.g.
/// `"vpm run"`) before anything in it is checked or removed: as [`create_run_dir`], but a
/// directory another vpm process is writing into is refused with
/// [`OutputError::RunDirInUse`] (with `--force` too) instead of having its outputs removed.
/// The lock file `.vpm.lock` does not make a directory non-empty, and `--force` leaves it.
/// Returns the directory, its lock and what `--force` removed and kept.
pub fn create_locked_run_dir(
    case_name: &str,
    out: Option<&Path>,
    force: bool,
    purpose: &str,
) -> Result<(PathBuf, RunLock, ForceCleanup), OutputError> {
    match out {
        Some(dir) => {
            ensure_dir(dir)?;
            let lock = RunLock::acquire(dir, purpose)?;
            let cleanup = claim(dir, force)?;
            Ok((dir.to_path_buf(), lock, cleanup))
        }
        None => {
            let dir = create_default_in(Path::new("runs"), case_name, &super::utc_now_compact())?;
            let lock = RunLock::acquire(&dir, purpose)?;
            Ok((dir, lock, ForceCleanup::default()))
        }
    }
}

/// Choose and create the run directory (without locking it: see [`create_locked_run_dir`]).
///
/// * `out = Some(dir)`: use `dir` (from `--out`), creating it and its parents
///   if needed. An existing empty directory is accepted. An existing non-empty
///   directory is refused with [`OutputError::RunDirNotEmpty`] unless `force`;
///   with `force`, the entries a run writes ([`postprocess::layout::RUN_ENTRIES`]) are
///   removed and every other file is left alone.
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
/// empty), or with `force`, after removing an earlier run's entries ([`remove_run_outputs`]).
fn claim(dir: &Path, force: bool) -> Result<ForceCleanup, OutputError> {
    let mut names = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| OutputError::io("list directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| OutputError::io("list directory", dir, e))?;
        if entry.file_name() != LOCK_FILE {
            names.push(entry.file_name());
        }
    }
    if names.is_empty() {
        return Ok(ForceCleanup::default());
    }
    if !force {
        return Err(OutputError::RunDirNotEmpty {
            path: dir.to_path_buf(),
        });
    }
    remove_run_outputs(dir, names)
}

/// Removes from `dir` those of `names` that are entries of a run
/// ([`postprocess::layout::run_entry`]; symbolic links are removed themselves, never followed)
/// and reports them with the names kept.
fn remove_run_outputs(
    dir: &Path,
    names: Vec<std::ffi::OsString>,
) -> Result<ForceCleanup, OutputError> {
    let mut cleanup = ForceCleanup::default();
    for name in names {
        let shown = name.to_string_lossy().into_owned();
        let Some(entry) = name.to_str().and_then(run_entry) else {
            cleanup.kept.push(shown);
            continue;
        };
        let p = dir.join(&name);
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
        tracing::debug!("--force: removed earlier output {}", p.display());
        let folder = meta.is_dir() || matches!(entry, RunEntry::Folder(_));
        cleanup
            .removed
            .push(if folder { format!("{shown}/") } else { shown });
    }
    cleanup.removed.sort();
    cleanup.kept.sort();
    sync_dir_best_effort(dir);
    Ok(cleanup)
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
    fn force_removes_only_what_a_run_writes_and_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let outputs = [
            "case.toml",
            "manifest.json",
            "energy.png",
            "spectrum.png",
            "ring.png",
            "comparison.csv",
            "structures-00000010.png",
            "vorticity-00000010.png",
            ".manifest.json.tmp-123",
        ];
        let dir = dir_with(tmp.path(), "run", &outputs, "old");
        for d in [
            "spectral",
            "vortex",
            "checkpoints/ckpt-0000000010",
            "snapshots",
            "fields",
        ] {
            fs::create_dir_all(dir.join(d)).unwrap();
            fs::write(dir.join(d).join("x.csv"), "old").unwrap();
        }
        fs::write(dir.join("notes.txt"), "keep").unwrap();
        fs::write(dir.join("structures-final.png"), "keep").unwrap();
        dir_with(&dir, "analysis", &["a.py"], "keep");

        let (got, lock, cleanup) = create_locked_run_dir("tg", Some(&dir), true, "t").unwrap();
        assert_eq!(got, dir);
        assert_eq!(
            list(&dir),
            [".vpm.lock", "analysis", "notes.txt", "structures-final.png"]
        );
        assert_eq!(
            fs::read_to_string(dir.join("analysis").join("a.py")).unwrap(),
            "keep"
        );
        assert_eq!(
            cleanup.removed,
            [
                ".manifest.json.tmp-123",
                "case.toml",
                "checkpoints/",
                "comparison.csv",
                "energy.png",
                "fields/",
                "manifest.json",
                "ring.png",
                "snapshots/",
                "spectral/",
                "spectrum.png",
                "structures-00000010.png",
                "vortex/",
                "vorticity-00000010.png",
            ]
        );
        assert_eq!(
            cleanup.kept,
            ["analysis", "notes.txt", "structures-final.png"]
        );
        let line = cleanup.summary().unwrap();
        assert!(
            line.starts_with("--force: removed .manifest.json.tmp-123, case.toml, checkpoints/")
                && line.ends_with("; kept analysis, notes.txt, structures-final.png"),
            "{line}"
        );
        // Again: nothing of a run is left, and an empty directory says nothing.
        drop(lock);
        let (_, _, again) = create_locked_run_dir("tg", Some(&dir), true, "t").unwrap();
        assert_eq!(
            again.summary().unwrap(),
            "--force: nothing of an earlier run to remove; kept analysis, notes.txt, \
             structures-final.png"
        );
        let empty = dir_with(tmp.path(), "empty", &[], "");
        let (_, _, none) = create_locked_run_dir("tg", Some(&empty), true, "t").unwrap();
        assert_eq!(none.summary(), None);
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
        let (got, lock, _) = create_locked_run_dir("tg", Some(&dir), false, "vpm run").unwrap();
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
        let (_, _lock, _) = create_locked_run_dir("tg", Some(&dir), true, "vpm run").unwrap();
        assert!(!dir.join("case.toml").exists());
    }
}
