//! What a gravity case file asks for: the initial bodies (`[initial]` with a gravity `kind`) and
//! the run's gravity settings (`[gravity]`), parsed by `crate::config` into these types.

use super::bodies::BodySet;
use super::initial::{self, Collision, GalaxyModel, KeplerOrbit};
use super::io;
use super::GravityError;
use crate::device::DeviceRequest;
use crate::output::bodies::BodyFormat;
use crate::summation::EvaluatorKind;
use serde::Serialize;
use std::path::Path;

/// Which of the two galaxy models `kind = "galaxy"` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GalaxyName {
    MilkyWay,
    Andromeda,
}

impl GalaxyName {
    /// The spellings of `initial.model`.
    pub const ALL: [(&'static str, GalaxyName); 2] = [
        ("milky-way", GalaxyName::MilkyWay),
        ("andromeda", GalaxyName::Andromeda),
    ];

    pub fn as_str(self) -> &'static str {
        GalaxyName::ALL.iter().find(|(_, g)| *g == self).unwrap().0
    }

    /// The model with `n` bodies in all, its disk's rotation set up for the run's softening ε.
    pub fn model(self, n: usize, softening: f64) -> GalaxyModel {
        let mut model = match self {
            GalaxyName::MilkyWay => GalaxyModel::milky_way(n),
            GalaxyName::Andromeda => GalaxyModel::andromeda(n),
        };
        model.softening = softening;
        model
    }
}

impl std::fmt::Display for GalaxyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The format of a body file given as initial conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFileFormat {
    /// `m x y z vx vy vz` per line.
    Table,
    /// Big-endian Tipsy.
    Tipsy,
}

impl BodyFileFormat {
    pub const ALL: [(&'static str, BodyFileFormat); 2] = [
        ("table", BodyFileFormat::Table),
        ("tipsy", BodyFileFormat::Tipsy),
    ];

    pub fn as_str(self) -> &'static str {
        BodyFileFormat::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .unwrap()
            .0
    }
}

impl std::fmt::Display for BodyFileFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// `[initial]` of a gravity case, by `kind` (cases/README.md documents each key).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum BodyInitial {
    /// Two bodies on a Kepler orbit, started at pericentre.
    Kepler {
        eccentricity: f64,
        semi_major_axis: f64,
        masses: [f64; 2],
    },
    /// A Plummer sphere in Hénon units.
    Plummer { n: usize, seed: u64 },
    /// A uniform sphere with little motion.
    ColdCollapse {
        n: usize,
        virial_ratio: f64,
        seed: u64,
    },
    /// One disk galaxy (disk, bulge, halo) in equilibrium.
    Galaxy {
        n: usize,
        #[serde(serialize_with = "display")]
        model: GalaxyName,
        seed: u64,
    },
    /// A Milky-Way-like and an Andromeda-like galaxy on a parabolic orbit.
    GalaxyCollision {
        n: usize,
        seed: u64,
        /// Pericentre of the point-mass orbit (the model's default when absent).
        #[serde(skip_serializing_if = "Option::is_none")]
        pericentre: Option<f64>,
        /// Initial separation of the centres (the model's default when absent).
        #[serde(skip_serializing_if = "Option::is_none")]
        separation: Option<f64>,
    },
    /// Bodies read from a file.
    Bodies {
        file: String,
        #[serde(serialize_with = "display")]
        format: BodyFileFormat,
    },
}

impl BodyInitial {
    /// The TOML spelling of `kind`.
    pub fn kind_str(&self) -> &'static str {
        match self {
            BodyInitial::Kepler { .. } => "kepler",
            BodyInitial::Plummer { .. } => "plummer",
            BodyInitial::ColdCollapse { .. } => "cold-collapse",
            BodyInitial::Galaxy { .. } => "galaxy",
            BodyInitial::GalaxyCollision { .. } => "galaxy-collision",
            BodyInitial::Bodies { .. } => "bodies",
        }
    }

    /// The number of bodies, where the case states it (a file's is known once read).
    pub fn stated_len(&self) -> Option<usize> {
        match self {
            BodyInitial::Kepler { .. } => Some(2),
            BodyInitial::Plummer { n, .. }
            | BodyInitial::ColdCollapse { n, .. }
            | BodyInitial::Galaxy { n, .. }
            | BodyInitial::GalaxyCollision { n, .. } => Some(*n),
            BodyInitial::Bodies { .. } => None,
        }
    }

    /// The collision these keys describe, both disks set up for the run's softening ε.
    pub fn collision(
        n: usize,
        pericentre: Option<f64>,
        separation: Option<f64>,
        softening: f64,
    ) -> Collision {
        let mut c = Collision::milky_way_andromeda(n);
        for g in &mut c.galaxies {
            g.softening = softening;
        }
        if let Some(q) = pericentre {
            c.pericentre = q;
        }
        if let Some(d) = separation {
            c.separation = d;
        }
        c
    }

    /// The bodies at t = 0 for a run with softening ε (the galaxies' disks rotate in the softened
    /// field); a file path is taken relative to `base` (the case file's folder) unless absolute.
    pub fn bodies(&self, base: &Path, softening: f64) -> Result<BodySet, GravityError> {
        let bodies = match self {
            &BodyInitial::Kepler {
                eccentricity,
                semi_major_axis,
                masses,
            } => initial::kepler(&KeplerOrbit {
                masses,
                semi_major_axis,
                eccentricity,
            })?,
            &BodyInitial::Plummer { n, seed } => initial::plummer(n, seed)?,
            &BodyInitial::ColdCollapse {
                n,
                virial_ratio,
                seed,
            } => initial::cold_collapse(n, virial_ratio, seed)?,
            &BodyInitial::Galaxy { n, model, seed } => {
                initial::galaxy(&model.model(n, softening), seed)?
            }
            &BodyInitial::GalaxyCollision {
                n,
                seed,
                pericentre,
                separation,
            } => initial::galaxy_collision(
                &Self::collision(n, pericentre, separation, softening),
                seed,
            )?,
            BodyInitial::Bodies { file, format } => {
                let path = base.join(file);
                let (bodies, lines) = match format {
                    BodyFileFormat::Table => io::read_table_with_lines(&path)?,
                    BodyFileFormat::Tipsy => {
                        let bodies = io::read_tipsy(&path)?.0;
                        let records = (1..=bodies.len()).collect();
                        (bodies, records)
                    }
                };
                io::check_coincident(&path, &bodies, &lines, softening)?;
                bodies
            }
        };
        bodies.check()?;
        Ok(bodies)
    }
}

/// `[gravity]`: the force, its device and accuracy, the run's energy bound and its body outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct GravityConfig {
    /// `softening` ε ≥ 0 (length units of the case).
    pub softening: f64,
    /// `evaluator`: "auto" (default), "direct" or "fmm".
    pub evaluator: EvaluatorKind,
    /// `accuracy` of the FMM (relative); default 1e-4.
    pub accuracy: f64,
    /// `accuracy_check_every`: evaluations between the FMM's checks against all pairs.
    pub accuracy_check_every: Option<u64>,
    /// `device`: this section's own device (else the case's).
    pub device: Option<DeviceRequest>,
    /// `energy_error_limit`: the run stops when |E − E₀|/|E₀| exceeds it at an output.
    pub energy_error_limit: f64,
    /// `snapshot_every_steps` / `snapshot_every_time`: body snapshots (`None`: at the pictures'
    /// times only).
    pub snapshots: Option<crate::config::Cadence>,
    /// `snapshot_formats`: any of "npz", "vtp", "tipsy", "table" (default "npz", "vtp"); "npz"
    /// is written in any case (the pictures read it).
    pub snapshot_formats: Vec<BodyFormat>,
    /// `pictures_times`: the times of the surface-density pictures (default 0 and t_end).
    pub pictures_times: Vec<f64>,
}

impl GravityConfig {
    pub const DEFAULT_ACCURACY: f64 = 1e-4;
    pub const DEFAULT_ENERGY_ERROR_LIMIT: f64 = 1e-2;
    pub const DEFAULT_SNAPSHOT_FORMATS: [BodyFormat; 2] = [BodyFormat::Npz, BodyFormat::Vtp];

    /// The formats the snapshots are written in: the case's, with "npz" first if it lacks it.
    pub fn written_formats(&self) -> Vec<BodyFormat> {
        let mut f = self.snapshot_formats.clone();
        if !f.contains(&BodyFormat::Npz) {
            f.insert(0, BodyFormat::Npz);
        }
        f
    }

    /// The summation planner's options: the accuracy and the FMM's check cadence.
    pub fn evaluator_options(&self) -> crate::summation::planner::EvaluatorOptions {
        crate::summation::planner::EvaluatorOptions {
            accuracy: self.accuracy,
            check_every: self
                .accuracy_check_every
                .unwrap_or(crate::summation::planner::DEFAULT_CHECK_EVERY),
        }
    }
}
