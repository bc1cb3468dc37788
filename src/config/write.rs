//! The resolved case as TOML, through serde: [`Case`]'s `Serialize` and the field helpers the
//! derives in `mod.rs` name. The layout is the case-file layout of `cases/README.md`, so
//! [`Case::from_toml_str`] reads the text back to an equal `Case`.

use std::fmt::Display;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use super::{Cadence, Case, InitialCondition, OutputControl, RbfSolver};
use crate::gravity::cases::GravityConfig;
use crate::gravity::units::Units;
use crate::kernel::StretchingScheme;

/// The comment lines at the top of a resolved case.
pub(super) const HEADER: &str = "# Resolved case: every key with its value, defaults filled in.\n\
     # Run it again with `vpm run <this file>`; cases/README.md documents the keys.\n\n";

impl Serialize for Case {
    /// The case-file layout: `name`, `description` and `device` first, then one table per
    /// section; `[spectral]` and `[vortex]` only when present, and `output.spectra_times`
    /// only for field-defined flows (particle-defined ones have no spectra).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Case", 12)?;
        s.serialize_field("name", &self.name)?;
        s.serialize_field("description", &self.description)?;
        s.serialize_field("device", &self.device.to_string())?;
        match &self.initial {
            InitialCondition::Bodies(bodies) => {
                s.skip_field("flow")?;
                s.serialize_field("initial", bodies)?;
            }
            initial => {
                s.serialize_field("flow", &self.flow)?;
                s.serialize_field("initial", initial)?;
            }
        }
        match &self.units {
            Some(units) => s.serialize_field("units", &UnitsKeys(units))?,
            None => s.skip_field("units")?,
        }
        s.serialize_field("time", &self.time)?;
        s.serialize_field(
            "output",
            &OutputKeys {
                output: &self.output,
                spectra: !self.initial.is_particle_defined() && !self.initial.is_gravity(),
            },
        )?;
        s.serialize_field("checkpoint", &self.checkpoint)?;
        match &self.spectral {
            Some(spectral) => s.serialize_field("spectral", spectral)?,
            None => s.skip_field("spectral")?,
        }
        match &self.vortex {
            Some(vortex) => s.serialize_field("vortex", vortex)?,
            None => s.skip_field("vortex")?,
        }
        match &self.gravity {
            Some(gravity) => s.serialize_field("gravity", &GravityKeys(gravity))?,
            None => s.skip_field("gravity")?,
        }
        s.end()
    }
}

/// `[output]` as written: the cadence key, and `spectra_times` and the fields' keys when the
/// flow has a grid (field-defined flows).
struct OutputKeys<'a> {
    output: &'a OutputControl,
    spectra: bool,
}

impl Serialize for OutputKeys<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        cadence_entry(&mut map, "", &self.output.cadence)?;
        if self.spectra {
            let o = self.output;
            map.serialize_entry("spectra_times", &o.spectra_times)?;
            map.serialize_entry("fields_times", &o.fields_times)?;
            map.serialize_entry("fields_stride", &o.fields_stride)?;
            map.serialize_entry("fields_precision", &o.fields_precision.to_string())?;
            map.serialize_entry("structures_level", &o.structures_level)?;
        }
        map.end()
    }
}

/// `[units]` as written: `length = "1 kpc"`, `mass = "2.325e5 Msun"` (numbers that round-trip).
struct UnitsKeys<'a>(&'a Units);

impl Serialize for UnitsKeys<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let u = self.0;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry(
            "length",
            &format!("{:?} {}", u.length, u.length_unit.as_str()),
        )?;
        map.serialize_entry("mass", &format!("{:?} Msun", u.mass_msun))?;
        map.end()
    }
}

/// `[gravity]` as written, every default filled in.
struct GravityKeys<'a>(&'a GravityConfig);

impl Serialize for GravityKeys<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let g = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("softening", &g.softening)?;
        map.serialize_entry("evaluator", &g.evaluator.to_string())?;
        map.serialize_entry("accuracy", &g.accuracy)?;
        if let Some(c) = g.accuracy_check_every {
            map.serialize_entry("accuracy_check_every", &c)?;
        }
        if let Some(d) = &g.device {
            map.serialize_entry("device", &d.to_string())?;
        }
        map.serialize_entry("energy_error_limit", &g.energy_error_limit)?;
        if let Some(c) = &g.snapshots {
            cadence_entry(&mut map, "snapshot_", c)?;
        }
        let formats: Vec<&str> = g.snapshot_formats.iter().map(|f| f.as_str()).collect();
        map.serialize_entry("snapshot_formats", &formats)?;
        map.serialize_entry("pictures_times", &g.pictures_times)?;
        map.end()
    }
}

/// `{prefix}every_steps = N` or `{prefix}every_time = T` as one map entry.
fn cadence_entry<M: SerializeMap>(
    map: &mut M,
    prefix: &str,
    cadence: &Cadence,
) -> Result<(), M::Error> {
    match cadence {
        Cadence::Steps(n) => map.serialize_entry(&format!("{prefix}every_steps"), n),
        Cadence::Time(t) => map.serialize_entry(&format!("{prefix}every_time"), t),
    }
}

/// A value by its `Display` spelling (`dealias`, `evaluator`, `device`).
pub(super) fn display<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// An optional `device` by its spelling (skipped by the caller when `None`).
pub(super) fn display_opt<T: Display, S: Serializer>(
    value: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// `vortex.stretching`: `"classical"` or `"transposed"`.
pub(super) fn stretching<S: Serializer>(
    scheme: &StretchingScheme,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(super::stretching_str(*scheme))
}

/// `vortex.reinit_every`: the step count, or `"never"`.
pub(super) fn reinit_every<S: Serializer>(every: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match every {
        Some(k) => s.serialize_u64(*k),
        None => s.serialize_str("never"),
    }
}

/// `rbf`, and `rbf_tolerance` / `rbf_max_iterations` for conjugate gradients (flattened into
/// `[vortex]`).
pub(super) fn rbf_keys<S: Serializer>(rbf: &RbfSolver, s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(None)?;
    map.serialize_entry("rbf", rbf.as_str())?;
    if let RbfSolver::ConjugateGradient {
        tolerance,
        max_iterations,
    } = rbf
    {
        map.serialize_entry("rbf_tolerance", tolerance)?;
        map.serialize_entry("rbf_max_iterations", max_iterations)?;
    }
    map.end()
}

/// `reinit_projection` and `reinit_filter` (flattened into `[vortex]`).
pub(super) fn conditioning_keys<S: Serializer>(
    c: &crate::vortex::reinit::LatticeConditioning,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(None)?;
    map.serialize_entry(
        "reinit_projection",
        if c.solenoidal { "solenoidal" } else { "none" },
    )?;
    map.serialize_entry("reinit_filter", c.filter.as_str())?;
    map.end()
}

/// `snapshot_every_steps` / `snapshot_every_time`, or nothing (flattened into `[vortex]`).
pub(super) fn snapshot_keys<S: Serializer>(
    cadence: &Option<Cadence>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(None)?;
    if let Some(c) = cadence {
        cadence_entry(&mut map, "snapshot_", c)?;
    }
    map.end()
}

/// The resolved case text: [`HEADER`], then the case through `toml`, its floats short
/// ([`short_floats`]).
pub(super) fn to_toml_string(case: &Case) -> String {
    // Every field is a string, number, bool, array or table: serialization cannot fail.
    let body = toml::to_string(case).expect("a Case always serializes to TOML");
    format!("{HEADER}{}", short_floats(&body))
}

/// `body` with the floats that `toml` spells in more than 20 characters (`t_end = 1e20` as
/// `100000000000000000000.0`, 1e-300 with 300 zeros) in exponent form, the shortest that reads
/// back to the same value. Only the values of `key = value` lines that are numbers or arrays
/// of numbers are looked at.
fn short_floats(body: &str) -> String {
    let short = |token: &str| -> Option<String> {
        let long_float = token.len() > 20 && token.contains('.');
        let x: f64 = token.parse().ok().filter(|_| long_float)?;
        Some(format!("{x:e}"))
    };
    let mut out = String::with_capacity(body.len());
    for line in body.lines() {
        match line.split_once(" = ") {
            Some((key, value)) if !value.contains('"') => {
                out.push_str(key);
                out.push_str(" = ");
                for piece in value.split_inclusive(['[', ']', ',', ' ']) {
                    let token = piece.trim_end_matches(['[', ']', ',', ' ']);
                    out.push_str(&short(token).unwrap_or_else(|| token.to_string()));
                    out.push_str(&piece[token.len()..]);
                }
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}
