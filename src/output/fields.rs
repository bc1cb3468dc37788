//! Grid fields at chosen times (`[output] fields_times`): `<run>/fields/`.
//!
//! For each solver (`spectral`, `vortex`) and each time, at step `s`:
//!
//! * `<solver>-<s:08>.npz`: NumPy archive (uncompressed `savez` layout) with `velocity` and
//!   `vorticity` of shape (n, n, n, 3), `Q` of shape (n, n, n), in the case's
//!   `fields_precision` (f32 by default, or f64), indexed `[i, j, k]` ↔ (x_i, y_j, z_k) as in
//!   `final.npz`, x_i = −π + i·h_s with h_s = stride·2π/N; and `t` (0-d f64), `step` (0-d
//!   u64), `stride` (0-d u64), `x` (the n node coordinates, f64). n = N / stride.
//! * `<solver>-<s:08>.vti`: VTK XML ImageData for ParaView: `WholeExtent="0 n−1 0 n−1 0 n−1"`,
//!   `Origin="−π −π −π"`, `Spacing="h_s h_s h_s"`; point data `velocity`, `vorticity` (3
//!   components) and `Q`, Float32 or Float64 as in the npz; field data `TimeValue` and `step`.
//!   The periodic wrap node x = π is **not** included (it repeats x = −π), so the data cover
//!   [−π, π − h_s]³.
//! * `<solver>.pvd`: a VTK `Collection` of that solver's `.vti` files, sorted by step, rebuilt
//!   from the folder's contents on every write (a resumed run that rewrites a step never
//!   duplicates an entry).
//!
//! The names come from [`postprocess::layout`], which reads the npz files back for the
//! pictures. Every file is written atomically, in the order npz, vti, pvd.

use std::fmt;
use std::fs;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

use ndarray::{arr0, Array, Array1};
use ndarray_npy::WritableElement;
use postprocess::layout::{
    fields_stem, FIELDS_DIR, FIELD_Q, FIELD_STEP, FIELD_STRIDE, FIELD_T, FIELD_VELOCITY,
    FIELD_VORTICITY,
};
use serde::Serialize;

use super::npz::{npz_err, npz_writer, options_for, ZIP64_FROM_BYTES};
use super::vtk::{write_binary_array, write_time_field_data, Series};
use super::{format_f64, write_atomic_with, OutputError};
use crate::diagnostics::structures::GridFields;

/// Name of the node-coordinate array of a fields npz.
pub const FIELD_X: &str = "x";

/// Floating-point type of the written fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FieldPrecision {
    /// 4-byte floats (the default: half the disk, ample for pictures and ParaView).
    #[serde(rename = "f32")]
    F32,
    /// 8-byte floats (the solvers' own precision).
    #[serde(rename = "f64")]
    F64,
}

impl FieldPrecision {
    /// Bytes of one value.
    pub fn bytes(self) -> u64 {
        match self {
            FieldPrecision::F32 => 4,
            FieldPrecision::F64 => 8,
        }
    }

    fn vtk_type(self) -> &'static str {
        match self {
            FieldPrecision::F32 => "Float32",
            FieldPrecision::F64 => "Float64",
        }
    }
}

impl fmt::Display for FieldPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldPrecision::F32 => "f32",
            FieldPrecision::F64 => "f64",
        })
    }
}

/// One solver's fields at one time, as handed to [`write_fields`].
#[derive(Debug, Clone, Copy)]
pub struct FieldsFrame<'a> {
    /// The solver's folder name (`spectral`, `vortex`), the files' prefix.
    pub solver: &'a str,
    /// Simulation time (finite).
    pub t: f64,
    /// Step index.
    pub step: u64,
    /// Every `stride`-th node is written; divides `fields.n`.
    pub stride: usize,
    /// Floating-point type of the files.
    pub precision: FieldPrecision,
    /// The fields on the solver grid.
    pub fields: &'a GridFields,
}

impl FieldsFrame<'_> {
    /// Nodes per side written.
    pub fn n_out(&self) -> usize {
        self.fields.n / self.stride
    }

    /// The value of `array` (one scalar on the N³ grid) at written node (i, j, k), which is grid
    /// node (i·s, j·s, k·s) for stride s.
    fn at(&self, array: &[f64], i: usize, j: usize, k: usize) -> f64 {
        let (n, s) = (self.fields.n, self.stride);
        array[((i * s) * n + j * s) * n + k * s]
    }
}

/// Disk bytes of one solver's fields at one time for an N³ grid: the npz and the base64 `.vti`
/// (4/3 of the raw values), seven values per node.
pub fn fields_disk_bytes(n: usize, stride: usize, precision: FieldPrecision) -> u64 {
    let nodes = ((n / stride.max(1)) as u64).pow(3);
    let raw = nodes * 7 * precision.bytes();
    raw + raw * 4 / 3 + 64 * 1024
}

fn series(solver: &str) -> (String, String) {
    (format!("{solver}-"), format!("{solver}.pvd"))
}

/// Write `frame`'s files (module docs) under `<run_dir>/fields/`, creating the folder; an
/// existing file of the same step is replaced. Returns the paths written (npz, vti, pvd).
///
/// Errors: a grid of fewer than 2 nodes or arrays of the wrong length, a stride that does not
/// divide the grid, a non-finite `t` (nothing written), or any I/O failure, naming the file.
pub fn write_fields(run_dir: &Path, frame: &FieldsFrame) -> Result<Vec<PathBuf>, OutputError> {
    let dir = run_dir.join(FIELDS_DIR);
    let stem = fields_stem(frame.solver, frame.step);
    let npz_path = dir.join(format!("{stem}.npz"));
    let vti_path = dir.join(format!("{stem}.vti"));
    let n = frame.fields.n;
    let f = frame.fields;
    let len = n.checked_pow(3).unwrap_or(usize::MAX);
    let arrays = f.velocity.iter().chain(&f.vorticity).chain([&f.q]);
    if n < 2 || arrays.into_iter().any(|a| a.len() != len) {
        return Err(OutputError::invalid(
            &npz_path,
            format!("fields of a {n}³ grid need n ≥ 2 and n³ values in every array"),
        ));
    }
    if frame.stride == 0 || !n.is_multiple_of(frame.stride) {
        return Err(OutputError::invalid(
            &npz_path,
            format!(
                "stride {} does not divide the grid's {n} nodes",
                frame.stride
            ),
        ));
    }
    if !frame.t.is_finite() {
        return Err(OutputError::invalid(
            &npz_path,
            format!("time {} is not finite", frame.t),
        ));
    }
    fs::create_dir_all(&dir).map_err(|e| OutputError::io("create directory", &dir, e))?;
    write_atomic_with(&npz_path, |w, tmp| match frame.precision {
        FieldPrecision::F32 => write_npz(w, tmp, frame, |x| x as f32),
        FieldPrecision::F64 => write_npz(w, tmp, frame, |x| x),
    })?;
    write_atomic_with(&vti_path, |w, tmp| {
        write_vti(w, frame).map_err(|e| OutputError::io("write", tmp, e))
    })?;
    let (prefix, pvd) = series(frame.solver);
    let s = Series {
        prefix: &prefix,
        ext: ".vti",
        pvd: &pvd,
    };
    s.rewrite_pvd(&dir, frame.step, frame.t)?;
    Ok(vec![npz_path, vti_path, dir.join(pvd)])
}

fn write_npz<W, T>(
    w: W,
    path: &Path,
    frame: &FieldsFrame,
    convert: impl Fn(f64) -> T,
) -> Result<(), OutputError>
where
    W: Write + Seek,
    T: WritableElement + Copy,
{
    let m = frame.n_out();
    let mut npz = npz_writer(w);
    let big = |len: usize| options_for(len, ZIP64_FROM_BYTES);
    for (name, parts) in [
        (FIELD_VELOCITY, &frame.fields.velocity),
        (FIELD_VORTICITY, &frame.fields.vorticity),
    ] {
        let a = Array::from_shape_fn((m, m, m, 3), |(i, j, k, c)| {
            convert(frame.at(&parts[c], i, j, k))
        });
        npz.add_array_with_options(name, &a, big(a.len()))
            .map_err(|e| npz_err("write", path, e))?;
    }
    let q = Array::from_shape_fn((m, m, m), |(i, j, k)| {
        convert(frame.at(&frame.fields.q, i, j, k))
    });
    npz.add_array_with_options(FIELD_Q, &q, big(q.len()))
        .map_err(|e| npz_err("write", path, e))?;
    let h = std::f64::consts::TAU / m as f64;
    let x = Array1::from_shape_fn(m, |i| -std::f64::consts::PI + i as f64 * h);
    npz.add_array(FIELD_X, &x)
        .map_err(|e| npz_err("write", path, e))?;
    npz.add_array(FIELD_T, &arr0(frame.t))
        .map_err(|e| npz_err("write", path, e))?;
    npz.add_array(FIELD_STEP, &arr0(frame.step))
        .map_err(|e| npz_err("write", path, e))?;
    npz.add_array(FIELD_STRIDE, &arr0(frame.stride as u64))
        .map_err(|e| npz_err("write", path, e))?;
    npz.finish().map_err(|e| npz_err("write", path, e))?;
    Ok(())
}

/// Point data in VTK's order (x fastest, then y, then z), one component per array of `parts`
/// (interleaved per point).
fn vtk_values<'a, const B: usize>(
    frame: &'a FieldsFrame,
    parts: &'a [&'a [f64]],
    to_bytes: fn(f64) -> [u8; B],
) -> impl ExactSizeIterator<Item = [u8; B]> + 'a {
    let m = frame.n_out();
    let comps = parts.len();
    (0..m * m * m * comps).map(move |idx| {
        let c = idx % comps;
        let p = idx / comps;
        let (i, j, k) = (p % m, (p / m) % m, p / (m * m));
        to_bytes(frame.at(parts[c], i, j, k))
    })
}

fn write_vti<W: Write>(w: &mut W, frame: &FieldsFrame) -> io::Result<()> {
    let m = frame.n_out();
    let h = std::f64::consts::TAU / m as f64;
    let origin = format_f64(-std::f64::consts::PI);
    let spacing = format_f64(h);
    let extent = format!("0 {e} 0 {e} 0 {e}", e = m - 1);
    write!(
        w,
        "<?xml version=\"1.0\"?>\n\
         <VTKFile type=\"ImageData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n\
         \x20 <ImageData WholeExtent=\"{extent}\" Origin=\"{origin} {origin} {origin}\" Spacing=\"{spacing} {spacing} {spacing}\">\n"
    )?;
    write_time_field_data(w, frame.t, frame.step)?;
    write!(
        w,
        "    <Piece Extent=\"{extent}\">\n\
         \x20     <PointData Scalars=\"Q\" Vectors=\"velocity\">\n"
    )?;
    let f = frame.fields;
    let arrays: [(&str, Vec<&[f64]>); 3] = [
        (
            FIELD_VELOCITY,
            f.velocity.iter().map(Vec::as_slice).collect(),
        ),
        (
            FIELD_VORTICITY,
            f.vorticity.iter().map(Vec::as_slice).collect(),
        ),
        (FIELD_Q, vec![f.q.as_slice()]),
    ];
    let ty = frame.precision.vtk_type();
    for (name, parts) in &arrays {
        match frame.precision {
            FieldPrecision::F32 => write_binary_array(
                w,
                ty,
                name,
                parts.len(),
                vtk_values(frame, parts, |x| (x as f32).to_le_bytes()),
            )?,
            FieldPrecision::F64 => write_binary_array(
                w,
                ty,
                name,
                parts.len(),
                vtk_values(frame, parts, f64::to_le_bytes),
            )?,
        }
    }
    w.write_all(b"      </PointData>\n      <CellData>\n      </CellData>\n    </Piece>\n  </ImageData>\n</VTKFile>\n")
}
