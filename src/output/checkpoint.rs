//! Checkpoints: `<run>/checkpoints/ckpt-<step:010>/{state.npz, meta.json}`.
//!
//! A checkpoint is assembled in a temporary directory `.ckpt-<step>.tmp-<pid>`
//! (both files fsynced, then the directory), then renamed into place, so a
//! directory named `ckpt-*` is always complete unless the disk itself lost
//! data. A checkpoint is *valid* only if both files parse; readers skip
//! invalid ones and fall back to the previous checkpoint.
//!
//! Rewriting an existing step (e.g. a resumed run whose schedule fires at the
//! resumed step) first moves the old directory aside to
//! `.ckpt-<step>.old-<pid>`, renames the new one in, then deletes the old one;
//! should the process die between the two renames, readers still find the
//! moved-aside checkpoint.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use ndarray_npy::NpzReader;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::npz::{into_c_order_vec, read_npz_arrays, shape_of, view_of, write_npz_arrays};
use super::{fill_and_sync, sync_dir_best_effort, OutputError};

/// Name of the checkpoints folder inside the run directory.
pub const CHECKPOINTS_DIR: &str = postprocess::layout::CHECKPOINTS_DIR;
const STATE_FILE: &str = "state.npz";
const META_FILE: &str = "meta.json";

/// Named f64 arrays of any shape, stored in `state.npz`: `(name, shape, data)`
/// with `data` flat in C (row-major) order and `shape.iter().product() == data.len()`
/// (an empty shape is a scalar holding one value).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointArrays {
    /// `(name, shape, data)`, in the order written.
    pub arrays: Vec<(String, Vec<usize>, Vec<f64>)>,
}

impl CheckpointArrays {
    /// No arrays.
    pub fn new() -> CheckpointArrays {
        CheckpointArrays::default()
    }

    /// Add an array (builder style).
    pub fn push(&mut self, name: impl Into<String>, shape: Vec<usize>, data: Vec<f64>) {
        self.arrays.push((name.into(), shape, data));
    }

    /// The shape and data of the array called `name`.
    pub fn get(&self, name: &str) -> Option<(&[usize], &[f64])> {
        self.arrays
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, s, d)| (s.as_slice(), d.as_slice()))
    }
}

/// Whether a directory entry is a published checkpoint or one moved aside
/// while being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// `.ckpt-<step>.old-<pid>`
    Displaced,
    /// `ckpt-<step:010>`
    Final,
}

#[derive(Debug, Clone)]
struct Entry {
    step: u64,
    kind: Kind,
    path: PathBuf,
}

fn final_name(step: u64) -> String {
    format!("ckpt-{step:010}")
}

/// The `meta.json` of checkpoint `step` of the run in `run_dir` (as published; one being
/// replaced is under another name for a moment).
pub fn checkpoint_meta_path(run_dir: &Path, step: u64) -> PathBuf {
    run_dir
        .join(CHECKPOINTS_DIR)
        .join(final_name(step))
        .join(META_FILE)
}

fn parse_step(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Classify a name in the checkpoints folder.
enum Name {
    Checkpoint(u64, Kind),
    Temp,
    Other,
}

fn classify(name: &str) -> Name {
    if let Some(rest) = name.strip_prefix("ckpt-") {
        return match parse_step(rest) {
            Some(step) => Name::Checkpoint(step, Kind::Final),
            None => Name::Other,
        };
    }
    if let Some(rest) = name.strip_prefix(".ckpt-") {
        if let Some((digits, tail)) = rest.split_once('.') {
            if let Some(step) = parse_step(digits) {
                if tail.starts_with("old-") {
                    return Name::Checkpoint(step, Kind::Displaced);
                }
                if tail.starts_with("tmp-") {
                    return Name::Temp;
                }
            }
        }
    }
    Name::Other
}

/// List checkpoint directories, newest first (a published checkpoint before a
/// moved-aside one of the same step), plus the temporary directories found.
fn list(ckdir: &Path) -> Result<(Vec<Entry>, Vec<PathBuf>), OutputError> {
    let rd = match fs::read_dir(ckdir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(OutputError::io("list directory", ckdir, e)),
    };
    let mut entries = Vec::new();
    let mut temps = Vec::new();
    for de in rd {
        let de = de.map_err(|e| OutputError::io("list directory", ckdir, e))?;
        let is_dir = de.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if !is_dir {
            continue;
        }
        let name = de.file_name();
        let Some(name) = name.to_str() else { continue };
        match classify(name) {
            Name::Checkpoint(step, kind) => entries.push(Entry {
                step,
                kind,
                path: de.path(),
            }),
            Name::Temp => temps.push(de.path()),
            Name::Other => {}
        }
    }
    entries.sort_by_key(|e| std::cmp::Reverse((e.step, e.kind)));
    Ok((entries, temps))
}

fn remove_dir(path: &Path) -> Result<(), OutputError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(OutputError::io("remove", path, e)),
    }
}

/// Create `path` and fill it through [`fill_and_sync`].
fn write_synced_file<F>(path: &Path, fill: F) -> Result<(), OutputError>
where
    F: FnOnce(&mut BufWriter<File>, &Path) -> Result<(), OutputError>,
{
    let f = File::create(path).map_err(|e| OutputError::io("create", path, e))?;
    fill_and_sync(f, path, fill)
}

/// Write checkpoint `step` into `<run_dir>/checkpoints/ckpt-<step:010>/`
/// (`state.npz` with `arrays`, `meta.json` with `meta`), atomically, then
/// delete older checkpoints so that `keep` valid ones remain (oldest deleted
/// first; `keep` is at least 1). Leftover temporary directories from
/// interrupted writes are removed. Returns the checkpoint directory.
///
/// `meta` is any serde value (typically the run core's own struct); it is written as pretty
/// JSON, and its floats parse back bit-exactly (serde_json's `float_roundtrip`).
pub fn write_checkpoint<M: Serialize + ?Sized>(
    run_dir: &Path,
    step: u64,
    meta: &M,
    arrays: &CheckpointArrays,
    keep: usize,
) -> Result<PathBuf, OutputError> {
    let ckdir = run_dir.join(CHECKPOINTS_DIR);
    let final_dir = ckdir.join(final_name(step));

    // validate before touching the disk
    let mut seen = HashSet::new();
    let mut views = Vec::with_capacity(arrays.arrays.len());
    for (name, shape, data) in &arrays.arrays {
        if name.is_empty() || !seen.insert(name.as_str()) {
            return Err(OutputError::invalid(
                &final_dir,
                format!("checkpoint array name {name:?} is empty or repeated"),
            ));
        }
        views.push((name.as_str(), view_of(&final_dir, name, shape, data)?));
    }
    let meta_bytes = serde_json::to_vec_pretty(meta).map_err(|e| OutputError::Json {
        op: "serialize",
        path: final_dir.join(META_FILE),
        error: e,
    })?;

    fs::create_dir_all(&ckdir).map_err(|e| OutputError::io("create directory", &ckdir, e))?;
    let pid = std::process::id();
    let tmp = ckdir.join(format!(".ckpt-{step}.tmp-{pid}"));
    remove_dir(&tmp)?;
    let result = (|| {
        fs::create_dir(&tmp).map_err(|e| OutputError::io("create directory", &tmp, e))?;
        let state = tmp.join(STATE_FILE);
        write_synced_file(&state, |w, p| write_npz_arrays(w, p, &views))?;
        write_synced_file(&tmp.join(META_FILE), |w, p| {
            w.write_all(&meta_bytes)
                .and_then(|()| w.write_all(b"\n"))
                .map_err(|e| OutputError::io("write", p, e))
        })?;
        sync_dir_best_effort(&tmp);

        // publish
        let old = ckdir.join(format!(".ckpt-{step}.old-{pid}"));
        let replacing = final_dir.exists();
        if replacing {
            remove_dir(&old)?;
            fs::rename(&final_dir, &old).map_err(|e| OutputError::Rename {
                from: final_dir.clone(),
                to: old.clone(),
                error: e,
            })?;
        }
        fs::rename(&tmp, &final_dir).map_err(|e| OutputError::Rename {
            from: tmp.clone(),
            to: final_dir.clone(),
            error: e,
        })?;
        sync_dir_best_effort(&ckdir);
        if replacing {
            remove_dir(&old)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }

    prune(&ckdir, keep.max(1))?;
    Ok(final_dir)
}

/// Cheap validity check: `meta.json` parses and the zip directory of
/// `state.npz` can be read (a truncated file loses its central directory).
fn quick_valid(dir: &Path) -> bool {
    let meta_ok = fs::read(dir.join(META_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some();
    meta_ok
        && File::open(dir.join(STATE_FILE))
            .ok()
            .and_then(|f| NpzReader::new(io::BufReader::new(f)).ok())
            .and_then(|mut r| r.names().ok())
            .is_some()
}

/// Keep the newest `keep` valid checkpoints; delete every checkpoint older
/// than the oldest one kept, moved-aside copies whose step is published again,
/// and temporary directories of interrupted writes. Invalid checkpoints newer
/// than the cut are left in place (readers skip them).
fn prune(ckdir: &Path, keep: usize) -> Result<(), OutputError> {
    let (entries, temps) = list(ckdir)?;
    for t in temps {
        tracing::info!("removing unfinished checkpoint {}", t.display());
        remove_dir(&t)?;
    }
    let finals: HashSet<u64> = entries
        .iter()
        .filter(|e| e.kind == Kind::Final)
        .map(|e| e.step)
        .collect();
    let mut valid = 0usize;
    for e in entries {
        if e.kind == Kind::Displaced && finals.contains(&e.step) {
            remove_dir(&e.path)?;
            continue;
        }
        if valid >= keep {
            tracing::debug!("removing old checkpoint {}", e.path.display());
            remove_dir(&e.path)?;
        } else if quick_valid(&e.path) {
            valid += 1;
        }
    }
    sync_dir_best_effort(ckdir);
    Ok(())
}

/// Read one checkpoint directory completely, `meta.json` as an `M`.
fn read_one<M: DeserializeOwned>(dir: &Path) -> Result<(M, CheckpointArrays), OutputError> {
    let meta_path = dir.join(META_FILE);
    let bytes = fs::read(&meta_path).map_err(|e| OutputError::io("read", &meta_path, e))?;
    let meta = serde_json::from_slice(&bytes).map_err(|e| OutputError::Json {
        op: "parse",
        path: meta_path.clone(),
        error: e,
    })?;
    let arrays = read_npz_arrays(&dir.join(STATE_FILE))?
        .into_iter()
        .map(|(name, a)| {
            let shape = shape_of(&a);
            (name, shape, into_c_order_vec(a))
        })
        .collect();
    Ok((meta, CheckpointArrays { arrays }))
}

/// The latest valid checkpoint of the run: the highest step whose `meta.json` parses as an
/// `M` and whose `state.npz` parses, as `(step, meta, arrays)`. Invalid checkpoints (a
/// `meta.json` of another shape than `M` included) are skipped with a warning that says why.
/// `Ok(None)` if there is none (or no `checkpoints/` folder); `Err` only if the folder cannot
/// be listed.
pub fn read_latest_checkpoint_as<M: DeserializeOwned>(
    run_dir: &Path,
) -> Result<Option<(u64, M, CheckpointArrays)>, OutputError> {
    let ckdir = run_dir.join(CHECKPOINTS_DIR);
    let (entries, _) = list(&ckdir)?;
    for e in entries {
        match read_one(&e.path) {
            Ok((meta, arrays)) => return Ok(Some((e.step, meta, arrays))),
            Err(err) => tracing::warn!("skipping invalid checkpoint: {err}"),
        }
    }
    Ok(None)
}

/// [`read_latest_checkpoint_as`] with `meta.json` as untyped JSON.
pub fn read_latest_checkpoint(
    run_dir: &Path,
) -> Result<Option<(u64, serde_json::Value, CheckpointArrays)>, OutputError> {
    read_latest_checkpoint_as(run_dir)
}

#[cfg(test)]
mod tests {
    use super::super::tests::list as names;
    use super::*;
    use serde_json::json;

    fn arrays(seed: f64) -> CheckpointArrays {
        let mut a = CheckpointArrays::new();
        a.push(
            "x",
            vec![2, 3],
            vec![seed, 0.1, -0.0, 5e-324, f64::MAX, 1.0 / 3.0],
        );
        a.push("alpha", vec![4], vec![1.0, 2.0, 3.0, seed]);
        a.push("t", vec![], vec![seed * 0.5]);
        a.push("empty", vec![0, 3], vec![]);
        a
    }

    #[test]
    fn round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = json!({"step": 10, "t": 0.1, "dt": 1e-3, "csv_len": {"energy": 1234}});
        let a = arrays(0.7);
        let dir = write_checkpoint(tmp.path(), 10, &meta, &a, 3).unwrap();
        assert_eq!(dir, tmp.path().join("checkpoints").join("ckpt-0000000010"));
        assert_eq!(checkpoint_meta_path(tmp.path(), 10), dir.join("meta.json"));
        assert_eq!(names(&dir), vec!["meta.json", "state.npz"]);
        let (step, meta2, a2) = read_latest_checkpoint(tmp.path()).unwrap().unwrap();
        assert_eq!(step, 10);
        assert_eq!(meta2, meta);
        assert_eq!(a2.arrays.len(), a.arrays.len());
        for ((n1, s1, d1), (n2, s2, d2)) in a.arrays.iter().zip(&a2.arrays) {
            assert_eq!(n1, n2);
            assert_eq!(s1, s2);
            let b1: Vec<u64> = d1.iter().map(|x| x.to_bits()).collect();
            let b2: Vec<u64> = d2.iter().map(|x| x.to_bits()).collect();
            assert_eq!(b1, b2);
        }
        assert_eq!(a2.get("alpha").unwrap().0, &[4]);
        // no temporaries left
        assert_eq!(
            names(&tmp.path().join("checkpoints")),
            vec!["ckpt-0000000010"]
        );
    }

    #[test]
    fn no_checkpoint_is_none() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_latest_checkpoint(tmp.path()).unwrap().is_none());
        fs::create_dir(tmp.path().join("checkpoints")).unwrap();
        assert!(read_latest_checkpoint(tmp.path()).unwrap().is_none());
    }

    #[test]
    fn keep_two_deletes_older() {
        let tmp = tempfile::tempdir().unwrap();
        for step in [5u64, 10, 15, 20] {
            write_checkpoint(
                tmp.path(),
                step,
                &json!({"step": step}),
                &arrays(step as f64),
                2,
            )
            .unwrap();
        }
        assert_eq!(
            names(&tmp.path().join("checkpoints")),
            vec!["ckpt-0000000015", "ckpt-0000000020"]
        );
        let (step, meta, a) = read_latest_checkpoint(tmp.path()).unwrap().unwrap();
        assert_eq!(step, 20);
        assert_eq!(meta["step"], 20);
        assert_eq!(a.get("alpha").unwrap().1[3], 20.0);
    }

    #[test]
    fn corrupt_latest_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        write_checkpoint(tmp.path(), 100, &json!({"step": 100}), &arrays(1.0), 5).unwrap();
        let latest =
            write_checkpoint(tmp.path(), 200, &json!({"step": 200}), &arrays(2.0), 5).unwrap();
        // truncate the latest state.npz
        let state = latest.join("state.npz");
        let len = fs::metadata(&state).unwrap().len();
        let f = fs::OpenOptions::new().write(true).open(&state).unwrap();
        f.set_len(len / 2).unwrap();
        drop(f);
        let (step, meta, a) = read_latest_checkpoint(tmp.path()).unwrap().unwrap();
        assert_eq!(step, 100);
        assert_eq!(meta["step"], 100);
        assert_eq!(a.get("alpha").unwrap().1[3], 1.0);

        // a corrupt meta.json is skipped too
        fs::write(latest.join("meta.json"), "{").unwrap();
        assert_eq!(read_latest_checkpoint(tmp.path()).unwrap().unwrap().0, 100);

        // pruning with keep=1 keeps the valid one (the corrupt newer one is left alone)
        write_checkpoint(tmp.path(), 150, &json!({"step": 150}), &arrays(1.5), 1).unwrap();
        assert_eq!(
            names(&tmp.path().join("checkpoints")),
            vec!["ckpt-0000000150", "ckpt-0000000200"]
        );
        assert_eq!(read_latest_checkpoint(tmp.path()).unwrap().unwrap().0, 150);
    }

    #[test]
    fn rewrite_same_step_and_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let ck = tmp.path().join("checkpoints");
        write_checkpoint(tmp.path(), 7, &json!({"v": 1}), &arrays(1.0), 3).unwrap();
        // leftovers of an interrupted write by another process
        fs::create_dir_all(ck.join(".ckpt-8.tmp-99999")).unwrap();
        fs::write(ck.join(".ckpt-8.tmp-99999").join("state.npz"), "partial").unwrap();
        write_checkpoint(tmp.path(), 7, &json!({"v": 2}), &arrays(2.0), 3).unwrap();
        assert_eq!(names(&ck), vec!["ckpt-0000000007"]);
        let (step, meta, _) = read_latest_checkpoint(tmp.path()).unwrap().unwrap();
        assert_eq!((step, meta["v"].as_i64()), (7, Some(2)));
    }

    #[test]
    fn displaced_checkpoint_is_still_found() {
        // process died between moving ckpt 30 aside and renaming the new one in
        let tmp = tempfile::tempdir().unwrap();
        let ck = tmp.path().join("checkpoints");
        write_checkpoint(tmp.path(), 20, &json!({"step": 20}), &arrays(2.0), 5).unwrap();
        let d = write_checkpoint(tmp.path(), 30, &json!({"step": 30}), &arrays(3.0), 5).unwrap();
        fs::rename(&d, ck.join(".ckpt-30.old-4242")).unwrap();
        assert_eq!(read_latest_checkpoint(tmp.path()).unwrap().unwrap().0, 30);
    }

    #[test]
    fn bad_arrays_are_rejected_before_writing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut a = CheckpointArrays::new();
        a.push("x", vec![2, 2], vec![1.0; 3]);
        let err = write_checkpoint(tmp.path(), 1, &json!({}), &a, 2).unwrap_err();
        assert!(err.to_string().contains("ckpt-0000000001"), "{err}");
        let mut a = CheckpointArrays::new();
        a.push("x", vec![1], vec![1.0]);
        a.push("x", vec![1], vec![1.0]);
        assert!(write_checkpoint(tmp.path(), 1, &json!({}), &a, 2).is_err());
        assert!(!tmp.path().join("checkpoints").exists());
    }

    #[test]
    fn meta_floats_round_trip_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let mut rng = super::super::tests::Mix(99);
        let vals: Vec<f64> = (0..2000)
            .map(|_| f64::from_bits(rng.next()))
            .filter(|x| x.is_finite())
            .collect();
        let meta = json!({ "vals": vals });
        write_checkpoint(tmp.path(), 1, &meta, &CheckpointArrays::new(), 1).unwrap();
        let (_, back, a) = read_latest_checkpoint(tmp.path()).unwrap().unwrap();
        assert!(a.arrays.is_empty());
        let back: Vec<f64> = back["vals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(back.len(), vals.len());
        for (x, y) in vals.iter().zip(&back) {
            assert_eq!(x.to_bits(), y.to_bits());
        }
    }

    /// The run core's kind of meta: a typed struct.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct TypedMeta {
        step: u64,
        t: f64,
        dt: f64,
        device: String,
        history: Vec<f64>,
    }

    #[test]
    fn typed_meta_round_trips_bit_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let mut rng = super::super::tests::Mix(7);
        let meta = TypedMeta {
            step: 42,
            t: 0.1 + 0.2,
            dt: 5e-324,
            device: "cuda:1".into(),
            history: (0..500)
                .map(|_| f64::from_bits(rng.next()))
                .filter(|x| x.is_finite())
                .chain([-0.0, f64::MAX, f64::MIN_POSITIVE])
                .collect(),
        };
        write_checkpoint(tmp.path(), 42, &meta, &arrays(1.0), 2).unwrap();
        let (step, back, _) = read_latest_checkpoint_as::<TypedMeta>(tmp.path())
            .unwrap()
            .unwrap();
        assert_eq!(step, 42);
        let bits = |m: &TypedMeta| -> Vec<u64> {
            [m.t, m.dt]
                .iter()
                .chain(&m.history)
                .map(|x| x.to_bits())
                .collect()
        };
        assert_eq!(bits(&back), bits(&meta));
        assert_eq!(back, meta);
    }

    #[test]
    fn meta_of_another_shape_falls_back_to_an_older_checkpoint() {
        let tmp = tempfile::tempdir().unwrap();
        let typed = TypedMeta {
            step: 1,
            t: 0.5,
            dt: 0.5,
            device: "cpu".into(),
            history: vec![],
        };
        write_checkpoint(tmp.path(), 1, &typed, &arrays(1.0), 5).unwrap();
        write_checkpoint(tmp.path(), 2, &json!({"step": 2}), &arrays(2.0), 5).unwrap();
        let (step, back, _) = read_latest_checkpoint_as::<TypedMeta>(tmp.path())
            .unwrap()
            .unwrap();
        assert_eq!((step, back), (1, typed));
        // untyped, the newest one is valid
        assert_eq!(read_latest_checkpoint(tmp.path()).unwrap().unwrap().0, 2);
    }
}
