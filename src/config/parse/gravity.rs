//! Gravity cases: `[initial]` with a gravity `kind`, `[units]` and `[gravity]` (cases/README.md,
//! "Gravity cases"). The sections shared with flows (`[time]`, `[output]`, `[checkpoint]`) go
//! through the same parsers, with what a gravity run has no use for refused by name.

use super::{
    parse_checkpoint, parse_time, parse_times, section, valid_name, Doc, Section, NAME_ALLOWED,
};
use crate::config::{
    Cadence, Case, CaseError, EvaluatorKind, Flow, InitialCondition, OutputControl, TimeStep,
};
use crate::gravity::cases::{BodyFileFormat, BodyInitial, GalaxyName, GravityConfig};
use crate::gravity::units::{LengthUnit, Units};
use crate::output::bodies::BodyFormat;
use toml::de::DeTable;

/// The gravity solver, in the refusal of a group of GPUs for it.
const GRAVITY_SOLVER: &str = "the gravity solver";

/// The gravity `kind`s of `[initial]`.
pub(super) const GRAVITY_KINDS: [&str; 6] = [
    "kepler",
    "plummer",
    "cold-collapse",
    "galaxy",
    "galaxy-collision",
    "bodies",
];

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "device",
    "initial",
    "units",
    "time",
    "output",
    "checkpoint",
    "gravity",
];

/// Most bodies a case may ask for.
const N_MAX: i64 = 100_000_000;

/// The case of a gravity `kind` (the top-level keys are checked here).
pub(super) fn parse_gravity_case(
    doc: &Doc,
    root: &DeTable,
    default_name: &str,
) -> Result<Case, CaseError> {
    let top = Section {
        name: "",
        table: Some(root),
        line: None,
    };
    for (key, why) in [
        ("flow", "a gravity case has no fluid"),
        ("spectral", "a gravity case has no spectral grid"),
        ("vortex", "a gravity case has no vortex particles"),
    ] {
        if let Some(v) = top.get(key) {
            return Err(doc.error(
                Some(doc.line(&v.span())),
                key,
                format!("section [{key}]: {why} (initial.kind is a gravity kind); remove it"),
            ));
        }
    }
    top.check_keys(doc, TOP_KEYS, " of a gravity case")?;
    let name = match top.string(doc, "name", NAME_ALLOWED)? {
        Some(item) => {
            item.require(doc, valid_name(&item.value), NAME_ALLOWED)?;
            item.value
        }
        None => default_name.to_string(),
    };
    let description = top
        .string(doc, "description", "any string")?
        .map_or_else(String::new, |item| item.value);
    let device = top
        .single_device(doc, "device", GRAVITY_SOLVER)?
        .unwrap_or_default();
    let time_sec = section(doc, root, "time")?;
    let time = parse_time(doc, &time_sec)?;
    if let TimeStep::Cfl { .. } = time.step {
        return Err(doc.error(
            time_sec.line,
            "time.cfl",
            "[time]: a gravity case takes a fixed step `dt` (the leapfrog is symplectic only \
             with a fixed step); replace `cfl` by `dt`"
                .into(),
        ));
    }
    let initial = parse_bodies(doc, &section(doc, root, "initial")?)?;
    let units = parse_units(doc, &section(doc, root, "units")?)?;
    let output = parse_gravity_output(doc, &section(doc, root, "output")?)?;
    let checkpoint = parse_checkpoint(doc, &section(doc, root, "checkpoint")?, time.t_end)?;
    let gravity = parse_gravity(doc, &section(doc, root, "gravity")?, time.t_end, &initial)?;
    Ok(Case {
        name,
        description,
        device,
        flow: Flow { nu: 0.0 },
        initial: InitialCondition::Bodies(initial),
        time,
        output,
        checkpoint,
        spectral: None,
        vortex: None,
        units,
        gravity: Some(gravity),
    })
}

/// `[output]` of a gravity case: only the cadence of the diagnostics rows.
fn parse_gravity_output(doc: &Doc, sec: &Section) -> Result<OutputControl, CaseError> {
    sec.check_keys(
        doc,
        &["every_steps", "every_time"],
        " of a gravity case (pictures and snapshots are set in [gravity])",
    )?;
    let cadence = super::parse_cadence(doc, sec, Cadence::Steps(1))?;
    Ok(OutputControl {
        cadence,
        spectra_times: Vec::new(),
        fields_times: Vec::new(),
        fields_stride: 1,
        fields_precision: crate::config::FieldPrecision::F32,
        structures_level: postprocess::DEFAULT_Q_LEVEL,
    })
}

/// A body count key `n`: an integer in [lo, N_MAX].
fn body_count(doc: &Doc, sec: &Section, lo: i64) -> Result<usize, CaseError> {
    let allowed = format!("number of bodies: must be an integer ≥ {lo} and ≤ {N_MAX}");
    let n = sec
        .integer(doc, "n", &allowed)?
        .ok_or_else(|| sec.missing(doc, "n", "the number of bodies"))?;
    n.require(doc, (lo..=N_MAX).contains(&n.value), &allowed)?;
    Ok(n.value as usize)
}

fn seed(doc: &Doc, sec: &Section) -> Result<u64, CaseError> {
    const SEED: &str = "seed of the random sampling: must be an integer ≥ 0";
    match sec.integer(doc, "seed", SEED)? {
        None => Ok(1),
        Some(s) => {
            s.require(doc, s.value >= 0, SEED)?;
            Ok(s.value as u64)
        }
    }
}

/// An optional finite number > 0.
fn positive(doc: &Doc, sec: &Section, key: &str, what: &str) -> Result<Option<f64>, CaseError> {
    let allowed = format!("{what}: must be a finite number > 0");
    match sec.number(doc, key, &allowed)? {
        None => Ok(None),
        Some(x) => {
            x.require(doc, x.value.is_finite() && x.value > 0.0, &allowed)?;
            Ok(Some(x.value))
        }
    }
}

fn parse_bodies(doc: &Doc, sec: &Section) -> Result<BodyInitial, CaseError> {
    let kind = sec
        .string(doc, "kind", "")?
        .expect("the caller saw a gravity kind");
    let keys: &[&str] = match kind.value.as_str() {
        "kepler" => &["kind", "eccentricity", "semi_major_axis", "masses"],
        "plummer" => &["kind", "n", "seed"],
        "cold-collapse" => &["kind", "n", "seed", "virial_ratio"],
        "galaxy" => &["kind", "n", "seed", "model"],
        "galaxy-collision" => &["kind", "n", "seed", "pericentre", "separation"],
        _ => &["kind", "file", "format"],
    };
    sec.check_keys(doc, keys, &format!(" for kind = \"{}\"", kind.value))?;
    Ok(match kind.value.as_str() {
        "kepler" => {
            const E: &str = "orbital eccentricity: must be a number ≥ 0 and < 1";
            const MASSES: &str = "the two masses: two finite numbers > 0";
            let eccentricity = match sec.number(doc, "eccentricity", E)? {
                None => 0.5,
                Some(e) => {
                    e.require(doc, (0.0..1.0).contains(&e.value), E)?;
                    e.value
                }
            };
            let semi_major_axis =
                positive(doc, sec, "semi_major_axis", "semi-major axis")?.unwrap_or(1.0);
            let masses = match sec.numbers(doc, "masses", Some(2), MASSES)? {
                None => [0.5, 0.5],
                Some(m) => {
                    for x in &m.value {
                        x.require(doc, x.value.is_finite() && x.value > 0.0, MASSES)?;
                    }
                    [m.value[0].value, m.value[1].value]
                }
            };
            BodyInitial::Kepler {
                eccentricity,
                semi_major_axis,
                masses,
            }
        }
        "plummer" => BodyInitial::Plummer {
            n: body_count(doc, sec, 2)?,
            seed: seed(doc, sec)?,
        },
        "cold-collapse" => {
            const Q: &str = "virial ratio 2K/|W| at t = 0: must be a number ≥ 0 and < 1";
            let virial_ratio = match sec.number(doc, "virial_ratio", Q)? {
                None => 0.1,
                Some(q) => {
                    q.require(doc, (0.0..1.0).contains(&q.value), Q)?;
                    q.value
                }
            };
            BodyInitial::ColdCollapse {
                n: body_count(doc, sec, 2)?,
                virial_ratio,
                seed: seed(doc, sec)?,
            }
        }
        "galaxy" => BodyInitial::Galaxy {
            n: body_count(doc, sec, 64)?,
            model: sec.choice(doc, "model", &GalaxyName::ALL, GalaxyName::MilkyWay)?,
            seed: seed(doc, sec)?,
        },
        "galaxy-collision" => BodyInitial::GalaxyCollision {
            n: body_count(doc, sec, 128)?,
            seed: seed(doc, sec)?,
            pericentre: positive(doc, sec, "pericentre", "pericentre of the orbit")?,
            separation: positive(doc, sec, "separation", "initial separation")?,
        },
        _ => {
            const FILE: &str = "the body file: a non-empty path (relative to the case file)";
            let file = sec
                .string(doc, "file", FILE)?
                .ok_or_else(|| sec.missing(doc, "file", FILE))?;
            file.require(doc, !file.value.trim().is_empty(), FILE)?;
            let default = if [".tipsy", ".std", ".bin"]
                .iter()
                .any(|e| file.value.ends_with(e))
            {
                BodyFileFormat::Tipsy
            } else {
                BodyFileFormat::Table
            };
            BodyInitial::Bodies {
                file: absolute_from(doc, &file.value),
                format: sec.choice(doc, "format", &BodyFileFormat::ALL, default)?,
            }
        }
    })
}

/// `file` made absolute against the case file's folder (the case is copied into the run
/// directory, so a relative path would no longer resolve); unchanged for a named case.
fn absolute_from(doc: &Doc, file: &str) -> String {
    let path = std::path::Path::new(file);
    if path.is_absolute() {
        return file.to_string();
    }
    let origin = std::path::Path::new(doc.origin);
    match origin.parent() {
        Some(dir) if origin.is_file() => {
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            dir.join(path).to_string_lossy().into_owned()
        }
        _ => file.to_string(),
    }
}

/// `[units]`: `length = "1 kpc"`, `mass = "2.325e5 Msun"`; absent: N-body units.
fn parse_units(doc: &Doc, sec: &Section) -> Result<Option<Units>, CaseError> {
    if sec.table.is_none() {
        return Ok(None);
    }
    sec.check_keys(doc, &["length", "mass"], "")?;
    let units: Vec<String> = LengthUnit::ALL.iter().map(|(_, s)| s.to_string()).collect();
    let length_allowed = format!(
        "one length unit: a number > 0 and a unit, one of {} (e.g. \"1 kpc\")",
        units.join(", ")
    );
    const MASS: &str =
        "one mass unit in solar masses: a number > 0 and \"Msun\" (e.g. \"2.325e5 Msun\")";
    let length = sec
        .string(doc, "length", &length_allowed)?
        .ok_or_else(|| sec.missing(doc, "length", &length_allowed))?;
    let (value, unit) =
        split_quantity(&length.value).ok_or_else(|| length.fail(doc, &length_allowed))?;
    let length_unit = LengthUnit::ALL
        .iter()
        .find(|(_, s)| *s == unit)
        .map(|(u, _)| *u)
        .ok_or_else(|| length.fail(doc, &length_allowed))?;
    let mass = sec
        .string(doc, "mass", MASS)?
        .ok_or_else(|| sec.missing(doc, "mass", MASS))?;
    let (mass_msun, unit) = split_quantity(&mass.value).ok_or_else(|| mass.fail(doc, MASS))?;
    mass.require(doc, unit == "Msun", MASS)?;
    Ok(Some(Units {
        length: value,
        length_unit,
        mass_msun,
    }))
}

/// "2.5 kpc" → (2.5, "kpc"), the number finite and > 0.
fn split_quantity(s: &str) -> Option<(f64, &str)> {
    let mut parts = s.split_whitespace();
    let value: f64 = parts.next()?.parse().ok()?;
    let unit = parts.next()?;
    (parts.next().is_none() && value.is_finite() && value > 0.0).then_some((value, unit))
}

fn parse_gravity(
    doc: &Doc,
    sec: &Section,
    t_end: f64,
    initial: &BodyInitial,
) -> Result<GravityConfig, CaseError> {
    const SOFTENING: &str = "the Plummer softening ε: must be a finite number ≥ 0 (0 only for \
                             few bodies that never meet, e.g. kind = \"kepler\")";
    const ACCURACY: &str = "requested relative accuracy of the FMM's forces: must be a number ≥ \
                            1e-12 and ≤ 1e-2";
    const CHECK_EVERY: &str = "evaluations between the FMM's checks against all pairs: must be \
                               an integer ≥ 0 (0: only at the first evaluation)";
    const LIMIT: &str = "the largest relative energy error |E − E₀|/|E₀| before the run stops: \
                         must be a number > 0";
    let formats = BodyFormat::ALL.map(|(_, f)| format!("\"{f}\"")).join(", ");
    let formats_allowed = format!(
        "an array of formats, each one of {formats}, none twice (\"npz\" is written in any case)"
    );
    if sec.table.is_none() {
        return Err(doc.error(
            None,
            "gravity",
            format!(
                "missing section [gravity]: initial.kind = \"{}\" is a gravity case; add \
                 [gravity] with at least `softening`",
                initial.kind_str()
            ),
        ));
    }
    sec.check_keys(
        doc,
        &[
            "softening",
            "evaluator",
            "accuracy",
            "accuracy_check_every",
            "device",
            "energy_error_limit",
            "snapshot_every_steps",
            "snapshot_every_time",
            "snapshot_formats",
            "pictures_times",
        ],
        "",
    )?;
    let softening = sec
        .number(doc, "softening", SOFTENING)?
        .ok_or_else(|| sec.missing(doc, "softening", "the Plummer softening ε ≥ 0"))?;
    softening.require(
        doc,
        softening.value.is_finite() && softening.value >= 0.0,
        SOFTENING,
    )?;
    let evaluator = sec.choice(
        doc,
        "evaluator",
        &[
            ("auto", EvaluatorKind::Auto),
            ("direct", EvaluatorKind::Direct),
            ("fmm", EvaluatorKind::Fmm),
        ],
        EvaluatorKind::Auto,
    )?;
    let accuracy = match sec.number(doc, "accuracy", ACCURACY)? {
        None => GravityConfig::DEFAULT_ACCURACY,
        Some(a) => {
            a.require(
                doc,
                (super::ACCURACY_RANGE.0..=super::ACCURACY_RANGE.1).contains(&a.value),
                ACCURACY,
            )?;
            a.value
        }
    };
    let accuracy_check_every = match sec.integer(doc, "accuracy_check_every", CHECK_EVERY)? {
        None => None,
        Some(c) => {
            c.require(doc, c.value >= 0, CHECK_EVERY)?;
            c.require(
                doc,
                evaluator != EvaluatorKind::Direct,
                "only allowed with gravity.evaluator = \"fmm\" or \"auto\" (all pairs need no check)",
            )?;
            Some(c.value as u64)
        }
    };
    let energy_error_limit = match sec.number(doc, "energy_error_limit", LIMIT)? {
        None => GravityConfig::DEFAULT_ENERGY_ERROR_LIMIT,
        Some(l) => {
            l.require(doc, l.value > 0.0, LIMIT)?;
            l.value
        }
    };
    let snapshots =
        super::parse_cadence_keys(doc, sec, "snapshot_every_steps", "snapshot_every_time")?;
    let snapshot_formats = match sec.array(
        doc,
        "snapshot_formats",
        None,
        &formats_allowed,
        "a string",
        |v| match v {
            toml::de::DeValue::String(s) => Some(s.to_string()),
            _ => None,
        },
    )? {
        None => GravityConfig::DEFAULT_SNAPSHOT_FORMATS.to_vec(),
        Some(list) => {
            let mut seen = Vec::new();
            for f in &list.value {
                match BodyFormat::parse(&f.value) {
                    Ok(format) if !seen.contains(&format) => seen.push(format),
                    _ => return Err(list.fail(doc, &formats_allowed)),
                }
            }
            list.require(doc, !seen.is_empty(), &formats_allowed)?;
            seen
        }
    };
    let pictures_times =
        parse_times(doc, sec, "pictures_times", t_end)?.unwrap_or(vec![0.0, t_end]);
    Ok(GravityConfig {
        softening: softening.value,
        evaluator,
        accuracy,
        accuracy_check_every,
        device: sec.single_device(doc, "device", GRAVITY_SOLVER)?,
        energy_error_limit,
        snapshots,
        snapshot_formats,
        pictures_times,
    })
}
