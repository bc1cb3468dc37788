//! Body files (docs/physics.md §11.5): tables of `m x y z vx vy vz` per line (the format of the
//! seeds' galaxy data) and standard big-endian Tipsy files (header: time f64, n, ndim, ngas,
//! ndark, nstar as i32, padding; then gas, dark and star records of f32). Both are read as
//! initial conditions and written as snapshots; errors name the file and the line or record.

use super::bodies::BodySet;
use super::GravityError;
use std::path::Path;

/// Reads a body table: one body per non-empty line, `m x y z vx vy vz` separated by white space;
/// `#` starts a comment. Components are `Body`, galaxy 0.
pub fn read_table(path: &Path) -> Result<BodySet, GravityError> {
    let _ = path;
    todo!("helper `bodyio`")
}

/// Writes `bodies` as a table (full f64 precision, so a table read back is bit-identical),
/// atomically (a temporary file renamed into place).
pub fn write_table(path: &Path, bodies: &BodySet) -> Result<(), GravityError> {
    let _ = (path, bodies);
    todo!("helper `bodyio`")
}

/// Reads a big-endian Tipsy file: dark-matter and star records become bodies (dark: `Halo`,
/// star: `Body`), and the time in its header is returned; gas particles are refused, saying so.
pub fn read_tipsy(path: &Path) -> Result<(BodySet, f64), GravityError> {
    let _ = path;
    todo!("helper `bodyio`")
}

/// Writes `bodies` at time `t` as a big-endian Tipsy file (halo bodies as dark matter, the others
/// as stars, softening ε in each record), atomically.
pub fn write_tipsy(
    path: &Path,
    bodies: &BodySet,
    t: f64,
    softening: f64,
) -> Result<(), GravityError> {
    let _ = (path, bodies, t, softening);
    todo!("helper `bodyio`")
}
