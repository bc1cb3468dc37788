//! Reading the 3-D field snapshots `fields/<solver>-<step:08>.npz`.

use crate::layout::{FIELDS_DIR, FIELD_Q, FIELD_STEP, FIELD_STRIDE, FIELD_T, FIELD_VORTICITY};
use crate::plots::Solver;
use anyhow::{bail, Context, Result};
use ndarray::{ArrayD, Ix0, IxDyn, OwnedRepr};
use ndarray_npy::{NpzReader, ReadNpyError, ReadNpzError, ReadableElement};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

/// The fields of one solver at one output step, as the plots need them
/// (the velocity is not kept).
#[derive(Clone, Debug, PartialEq)]
pub struct FieldSnapshot {
    /// Nodes per direction of the (possibly subsampled) grid.
    pub n: usize,
    /// Simulation time.
    pub t: f64,
    /// Solver step.
    pub step: u64,
    /// Subsampling of the solver grid (informational).
    pub stride: u64,
    /// Q = ½(‖Ω‖² − ‖S‖²) at the n³ nodes, C order: index (i·n + j)·n + k
    /// holds node (x_i, y_j, z_k), x_i = −π + 2πi/n.
    pub q: Vec<f32>,
    /// The vorticity at the nodes, shape (n, n, n, 3) in C order: index
    /// ((i·n + j)·n + k)·3 + c holds component c of node (i, j, k).
    pub vorticity: Vec<f32>,
}

impl FieldSnapshot {
    /// Check that the arrays fit `n`: n ≥ 2, n³ values of Q and 3n³ of the
    /// vorticity.
    ///
    /// # Errors
    ///
    /// An error saying what does not fit.
    pub fn check(&self) -> Result<()> {
        let n = self.n;
        if n < 2 {
            bail!("grid of n = {n} nodes per direction; at least 2 are needed");
        }
        let n3 = n
            .checked_mul(n)
            .and_then(|m| m.checked_mul(n))
            .with_context(|| format!("grid size {n}³ overflows"))?;
        if self.q.len() != n3 {
            bail!("Q has {} values, expected n³ = {n3}", self.q.len());
        }
        if Some(self.vorticity.len()) != n3.checked_mul(3) {
            bail!(
                "the vorticity has {} values, expected 3n³ = {}",
                self.vorticity.len(),
                3 * n3
            );
        }
        Ok(())
    }
}

/// One solver's fields, for a panel of the field pictures.
#[derive(Clone, Copy, Debug)]
pub struct FieldPanel<'a> {
    /// Which solver (sets the panel title and the surface colour).
    pub solver: Solver,
    /// Its fields.
    pub fields: &'a FieldSnapshot,
}

/// The root mean square √(mean Q²) over all values of `q` (0 for no
/// values; NaN when a value is NaN).
pub fn q_rms(q: &[f32]) -> f64 {
    if q.is_empty() {
        return 0.0;
    }
    mean_square(q).sqrt()
}

/// The mean of the squares of `values`, summed in f64 (NaN for none).
pub(crate) fn mean_square(values: &[f32]) -> f64 {
    values
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        / values.len() as f64
}

/// `<run_dir>/fields/<solver>-<step:08>.npz`.
pub fn fields_npz(run_dir: &Path, solver: Solver, step: u64) -> PathBuf {
    run_dir.join(FIELDS_DIR).join(format!(
        "{}.npz",
        crate::layout::fields_stem(solver.dir_name(), step)
    ))
}

/// The steps with a field snapshot (of either solver) in
/// `<run_dir>/fields/`, in increasing order; none when the folder does not
/// exist. Other files there (`.vti`, `.pvd`, temporary files) are ignored.
///
/// # Errors
///
/// The folder exists but cannot be listed.
pub fn field_steps(run_dir: &Path) -> Result<Vec<u64>> {
    let dir = run_dir.join(FIELDS_DIR);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut steps = BTreeSet::new();
    let entries =
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(step) = parse_fields_name(name) {
            steps.insert(step);
        }
    }
    Ok(steps.into_iter().collect())
}

/// The step of a file name `<solver>-<digits>.npz` (solver `spectral` or
/// `vortex`).
fn parse_fields_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".npz")?;
    let (solver, digits) = stem.rsplit_once('-')?;
    if !Solver::ALL.iter().any(|s| s.dir_name() == solver)
        || digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    digits.parse().ok()
}

/// Read a field snapshot written by `vpm`: arrays `Q` (n, n, n) and
/// `vorticity` (n, n, n, 3), each f32 or f64 (kept as f32), and the 0-d
/// `t` (f64), `step` (u64) and, when present, `stride` (u64; 1 when
/// absent). The velocity is not read.
///
/// # Errors
///
/// A missing or unreadable file, a missing array, a wrong element type or
/// shape, or n < 2: an error naming the file.
pub fn read_fields(path: &Path) -> Result<FieldSnapshot> {
    read_fields_inner(path).with_context(|| format!("cannot read fields from {}", path.display()))
}

fn read_fields_inner(path: &Path) -> Result<FieldSnapshot> {
    let file = File::open(path).context("cannot open the file")?;
    let mut npz = NpzReader::new(BufReader::new(file)).context("not an npz archive")?;
    let q = read_float_array(&mut npz, FIELD_Q)?;
    let shape = q.shape().to_vec();
    let n = shape.first().copied().unwrap_or(0);
    if shape.len() != 3 || shape.iter().any(|&d| d != n) {
        bail!("array {FIELD_Q:?} has shape {shape:?}; expected (n, n, n)");
    }
    let vorticity = read_float_array(&mut npz, FIELD_VORTICITY)?;
    let vshape = vorticity.shape().to_vec();
    if vshape != [n, n, n, 3] {
        bail!(
            "array {FIELD_VORTICITY:?} has shape {vshape:?}; expected ({n}, {n}, {n}, 3) \
             to match {FIELD_Q:?}"
        );
    }
    let t = match read_scalar::<f64, _>(&mut npz, FIELD_T) {
        Ok(t) => t,
        Err(e) => read_scalar::<f32, _>(&mut npz, FIELD_T)
            .map(f64::from)
            .map_err(|_| e)?,
    };
    let step = read_count(&mut npz, FIELD_STEP)?;
    let has_stride = npz
        .names()
        .context("cannot list the arrays")?
        .iter()
        .any(|name| name == FIELD_STRIDE);
    let stride = if has_stride {
        read_count(&mut npz, FIELD_STRIDE)?
    } else {
        1
    };
    let snapshot = FieldSnapshot {
        n,
        t,
        step,
        stride,
        q: into_vec(q),
        vorticity: into_vec(vorticity),
    };
    snapshot.check()?;
    Ok(snapshot)
}

/// The values of `a` in C order.
fn into_vec(a: ArrayD<f32>) -> Vec<f32> {
    if a.is_standard_layout() {
        let len = a.len();
        let (v, offset) = a.into_raw_vec_and_offset();
        let start = offset.unwrap_or(0);
        if start == 0 && v.len() == len {
            return v;
        }
        return v[start..start + len].to_vec();
    }
    a.iter().copied().collect()
}

/// Whether reading failed only because the element type differs.
fn wrong_type(e: &ReadNpzError) -> bool {
    matches!(e, ReadNpzError::Npy(ReadNpyError::WrongDescriptor(_)))
}

/// Array `name`, f32 or f64, as f32.
fn read_float_array<R: Read + Seek>(npz: &mut NpzReader<R>, name: &str) -> Result<ArrayD<f32>> {
    match npz.by_name::<OwnedRepr<f32>, IxDyn>(name) {
        Ok(a) => Ok(a),
        Err(e) if wrong_type(&e) => {
            let a = npz
                .by_name::<OwnedRepr<f64>, IxDyn>(name)
                .with_context(|| format!("array {name:?} (neither f32 nor f64)"))?;
            Ok(a.mapv(|v| v as f32))
        }
        Err(e) => Err(e).with_context(|| format!("array {name:?}")),
    }
}

/// The 0-d array `name` of element type `T`.
fn read_scalar<T: ReadableElement + Copy, R: Read + Seek>(
    npz: &mut NpzReader<R>,
    name: &str,
) -> Result<T> {
    let a = npz
        .by_name::<OwnedRepr<T>, Ix0>(name)
        .with_context(|| format!("array {name:?} (a 0-d array)"))?;
    Ok(a.into_scalar())
}

/// The 0-d integer array `name`: u64, or a non-negative i64.
fn read_count<R: Read + Seek>(npz: &mut NpzReader<R>, name: &str) -> Result<u64> {
    match read_scalar::<u64, _>(npz, name) {
        Ok(v) => Ok(v),
        Err(e) => match read_scalar::<i64, _>(npz, name) {
            Ok(v) if v >= 0 => Ok(v as u64),
            Ok(v) => bail!("array {name:?} is negative ({v})"),
            Err(_) => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(parse_fields_name("spectral-00000125.npz"), Some(125));
        assert_eq!(parse_fields_name("vortex-123456789.npz"), Some(123456789));
        assert_eq!(parse_fields_name("spectral-00000125.vti"), None);
        assert_eq!(parse_fields_name("spectral-00000125.npz.tmp-1-2"), None);
        assert_eq!(parse_fields_name("other-00000125.npz"), None);
        assert_eq!(parse_fields_name("spectral-.npz"), None);
        assert_eq!(parse_fields_name("spectral-12a.npz"), None);
        assert_eq!(parse_fields_name("spectral.pvd"), None);
    }

    #[test]
    fn rms() {
        assert_eq!(q_rms(&[]), 0.0);
        assert_eq!(q_rms(&[3.0, -3.0]), 3.0);
        assert!((q_rms(&[1.0, 0.0, 0.0, 1.0]) - 0.5f64.sqrt()).abs() < 1e-15);
        assert!(q_rms(&[1.0, f32::NAN]).is_nan());
    }
}
