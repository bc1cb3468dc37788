//! The run directory's layout: file names and CSV columns, defined once. `vpm` writes these
//! files and this crate reads them, both through the constants here.

/// The spectral solver's folder.
pub const SPECTRAL_DIR: &str = "spectral";
/// The vortex particle solver's folder.
pub const VORTEX_DIR: &str = "vortex";

/// `spectral/energy.csv`: a row per output time.
pub const SPECTRAL_ENERGY_CSV: &str = "spectral/energy.csv";
/// `spectral/spectra.csv`: a row per shell at each spectrum time.
pub const SPECTRAL_SPECTRA_CSV: &str = "spectral/spectra.csv";
/// `vortex/energy.csv` (field-defined runs with particles).
pub const VORTEX_ENERGY_CSV: &str = "vortex/energy.csv";
/// `vortex/spectra.csv` (field-defined runs with particles).
pub const VORTEX_SPECTRA_CSV: &str = "vortex/spectra.csv";
/// `comparison.csv`: vortex against spectral, K at output times and E(k) at spectrum times.
pub const COMPARISON_CSV: &str = "comparison.csv";
/// The vortex-ring history, relative to the run directory.
pub const RING_CSV: &str = "vortex/ring.csv";
/// The coaxial rings' history (`kind = "coaxial-rings"`), relative to the run directory.
pub const RINGS_CSV: &str = "vortex/rings.csv";
/// The Lamb–Oseen velocity profiles, relative to the run directory.
pub const LAMB_OSEEN_CSV: &str = "vortex/lamb_oseen.csv";
/// The final spectral velocity field.
pub const FINAL_NPZ: &str = "spectral/final.npz";

/// Columns of `energy.csv` (both solvers; the vortex file adds [`VORTEX_EXTRA_COLUMNS`]).
pub const ENERGY_COLUMNS: [&str; 13] = [
    "t",
    "step",
    "dt",
    "K",
    "eps",
    "Z",
    "minus_dKdt",
    "u_rms",
    "L",
    "T",
    "lambda",
    "Re_lambda",
    "max_div",
];
/// Columns of `spectra.csv`.
pub const SPECTRA_COLUMNS: [&str; 3] = ["t", "k", "E"];
/// Extra columns of `vortex/energy.csv` (after the [`ENERGY_COLUMNS`]; there `minus_dKdt` is
/// `nan`: the particle method has no right-hand side in Fourier space to take it from).
pub const VORTEX_EXTRA_COLUMNS: [&str; 8] = [
    "sigma_max_over_sigma0",
    "rbf_iterations",
    "rbf_residual",
    "total_strength",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "particles",
];
/// Columns of `comparison.csv`: `quantity` is `K` (k = 0) or `E` (shell k); rel_diff =
/// (vortex − spectral)/spectral.
pub const COMPARISON_COLUMNS: [&str; 6] = ["t", "quantity", "k", "spectral", "vortex", "rel_diff"];
/// Columns of `vortex/ring.csv`.
pub const RING_COLUMNS: [&str; 14] = [
    "t",
    "step",
    "dt",
    "z",
    "radius",
    "speed",
    "saffman_speed",
    "core",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "total_strength",
    "particles",
    "sigma_max_over_sigma0",
];
/// Columns of `vortex/rings.csv`: one row per output time and ring (`ring` = 1, 2, … in the
/// case's order). Per ring: its impulse-weighted axial position `z`, impulse radius `radius`,
/// speed dz/dt, Saffman's speed for its radius and `core` (the case's core, spread by
/// viscosity, times √(R/radius): a ring keeps its volume 2π²Rσ² as its radius changes; so
/// `speed − saffman_speed` is what the other rings induce), and its particle count; then the
/// totals over all particles, the same in every ring's row at one time: the impulse ½Σx×α, Σα
/// (`total_strength_*`) and the largest core radius `sigma_max`.
pub const RINGS_COLUMNS: [&str; 17] = [
    "t",
    "step",
    "dt",
    "ring",
    "z",
    "radius",
    "speed",
    "saffman_speed",
    "core",
    "particles",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "total_strength_x",
    "total_strength_y",
    "total_strength_z",
    "sigma_max",
];
/// Columns of `vortex/lamb_oseen.csv` (one row per output time and radius).
pub const LAMB_OSEEN_COLUMNS: [&str; 5] = ["t", "r", "u_theta", "u_exact", "rel_err"];

/// The columns of `vortex/energy.csv`: [`ENERGY_COLUMNS`] then [`VORTEX_EXTRA_COLUMNS`].
pub fn vortex_energy_columns() -> Vec<&'static str> {
    ENERGY_COLUMNS
        .iter()
        .chain(VORTEX_EXTRA_COLUMNS.iter())
        .copied()
        .collect()
}

/// The folder of the 3-D field snapshots: `fields/<solver>-<step:08>.npz` (and `.vti`/`.pvd`
/// files for ParaView, which this crate ignores).
pub const FIELDS_DIR: &str = "fields";
/// Array of a field snapshot: velocity, shape (n, n, n, 3), f32 or f64.
pub const FIELD_VELOCITY: &str = "velocity";
/// Array of a field snapshot: vorticity, shape (n, n, n, 3), f32 or f64.
pub const FIELD_VORTICITY: &str = "vorticity";
/// Array of a field snapshot: Q = ½(‖Ω‖² − ‖S‖²), shape (n, n, n), f32 or f64.
pub const FIELD_Q: &str = "Q";
/// Array of a field snapshot: the simulation time, 0-d f64.
pub const FIELD_T: &str = "t";
/// Array of a field snapshot: the step, 0-d u64.
pub const FIELD_STEP: &str = "step";
/// Array of a field snapshot: the subsampling of the solver grid, 0-d u64.
pub const FIELD_STRIDE: &str = "stride";

/// The name, without extension, of a solver's field snapshot at `step` inside [`FIELDS_DIR`]:
/// `fields_stem("spectral", 125)` is `"spectral-00000125"`. `solver` is a solver's folder name
/// ([`SPECTRAL_DIR`] or [`VORTEX_DIR`]).
pub fn fields_stem(solver: &str, step: u64) -> String {
    format!("{solver}-{step:08}")
}

/// The picture of the Q isosurfaces at `step`, in the run directory: `"structures-00000125.png"`.
pub fn structures_png(step: u64) -> String {
    format!("structures-{step:08}.png")
}

/// The picture of |ω| on the mid-plane z = 0 at `step`, in the run directory:
/// `"vorticity-00000125.png"`.
pub fn vorticity_slice_png(step: u64) -> String {
    format!("vorticity-{step:08}.png")
}
