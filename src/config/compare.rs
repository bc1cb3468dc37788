//! A resumed run's case against the case its checkpoint was computed with, key by key.
//!
//! Both cases are compared as their resolved TOML (what [`Case::to_toml_string`] writes, every
//! default filled in), flattened to dotted keys (`flow.nu`, `time.t_end`, `initial.rings`; an
//! array is one value). A key is *changeable* in a resumed run when [`CHANGEABLE`] lists it or
//! its section; every other key is *physical*: the state in the checkpoint was computed with its
//! value, and a resumed run that changes it is refused. A key the case files gain later is
//! therefore physical until it is listed here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::Case;

/// The keys that may change when a run is resumed: a dotted key, or `section.*` for every key
/// of a section. They change what is written, when the run ends and where it runs, never the
/// state's numbers: the name and description (labels of the plots and the manifest), `t_end`
/// and `max_steps`, `[output]`, `[checkpoint]`, the particle snapshots and the cadence of the
/// numerical-dissipation measurements (outputs, though in `[vortex]`), and the devices.
pub const CHANGEABLE: &[&str] = &[
    "name",
    "description",
    "device",
    "time.t_end",
    "time.max_steps",
    "output.*",
    "checkpoint.*",
    "spectral.device",
    "vortex.device",
    "vortex.snapshot_every_steps",
    "vortex.snapshot_every_time",
    "vortex.dissipation_every",
    "gravity.device",
    "gravity.energy_error_limit",
    "gravity.accuracy_check_every",
    "gravity.snapshot_every_steps",
    "gravity.snapshot_every_time",
    "gravity.snapshot_formats",
    "gravity.pictures_times",
    "units.*",
];

/// Whether the dotted `key` may change in a resumed run ([`CHANGEABLE`]).
pub fn is_changeable(key: &str) -> bool {
    CHANGEABLE.iter().any(|c| match c.strip_suffix(".*") {
        Some(section) => key
            .strip_prefix(section)
            .is_some_and(|rest| rest.starts_with('.')),
        None => *c == key,
    })
}

/// A key whose value differs between two cases; `None` where the key is not set in that case.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyChange {
    /// The dotted key, e.g. `flow.nu`.
    pub key: String,
    /// Its value in the earlier case.
    pub old: Option<toml::Value>,
    /// Its value in the later case.
    pub new: Option<toml::Value>,
}

impl KeyChange {
    /// Whether this key may change in a resumed run.
    pub fn is_changeable(&self) -> bool {
        is_changeable(&self.key)
    }

    /// The key as the case file spells it: `[section] key`, or `key` at the top level.
    fn in_file(&self) -> String {
        match self.key.rsplit_once('.') {
            Some((section, key)) => format!("[{section}] {key}"),
            None => self.key.clone(),
        }
    }

    /// The key within its section (`nu` for `flow.nu`).
    fn short(&self) -> &str {
        self.key.rsplit_once('.').map_or(&self.key, |(_, k)| k)
    }
}

/// A value as TOML writes it, or `not set`.
fn value_text(v: &Option<toml::Value>) -> String {
    v.as_ref()
        .map_or_else(|| "not set".to_string(), ToString::to_string)
}

impl fmt::Display for KeyChange {
    /// `time.t_end: 0.5 → 1.0` (`not set` for a missing value).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} → {}",
            self.key,
            value_text(&self.old),
            value_text(&self.new)
        )
    }
}

/// The resolved case as a flat map of dotted keys to values.
fn flatten(case: &Case) -> BTreeMap<String, toml::Value> {
    fn walk(prefix: &str, table: toml::Table, out: &mut BTreeMap<String, toml::Value>) {
        for (key, value) in table {
            let dotted = if prefix.is_empty() {
                key
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                toml::Value::Table(t) => walk(&dotted, t, out),
                v => {
                    out.insert(dotted, v);
                }
            }
        }
    }
    // Every field is a string, number, bool, array or table: serialization cannot fail.
    let table = toml::Table::try_from(case).expect("a Case always serializes to TOML");
    let mut out = BTreeMap::new();
    walk("", table, &mut out);
    out
}

/// The keys whose values differ between `old` and `new` (set in one only included), in
/// dotted-key order.
pub fn changed_keys(old: &Case, new: &Case) -> Vec<KeyChange> {
    let (old, new) = (flatten(old), flatten(new));
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| KeyChange {
            key: k.clone(),
            old: old.get(k).cloned(),
            new: new.get(k).cloned(),
        })
        .collect()
}

/// A resumed run's case changes physical keys: the refusal, one line per key with both values.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct PhysicalKeysChanged {
    /// The case file of the resumed run, as named in the message.
    pub file: String,
    /// The physical keys that changed (at least one).
    pub changes: Vec<KeyChange>,
    /// Step of the checkpoint resumed.
    pub step: u64,
    /// Time of the checkpoint resumed.
    pub t: f64,
}

impl fmt::Display for PhysicalKeysChanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (step, t) = (self.step, self.t);
        for (i, c) in self.changes.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let now = match &c.new {
                Some(v) => format!("{} = {v}", c.in_file()),
                None => format!("{} is not set", c.in_file()),
            };
            let was = match &c.old {
                Some(v) => format!("with {} = {v}", c.short()),
                None => "without it".to_string(),
            };
            write!(
                f,
                "{}: {now}, but the run was computed {was} up to step {step} (t = {t})",
                self.file
            )?;
        }
        if self.changes.len() == 1 {
            write!(
                f,
                "; a physical key cannot change in a resumed run: put it back, or start a new run"
            )
        } else {
            write!(
                f,
                "\nphysical keys cannot change in a resumed run: put them back, or start a new run"
            )
        }
    }
}

/// Compares `case`, the case a run resumes with (read from `file`), with `stored`, the case its
/// checkpoint at `step` (time `t`) was computed with. Returns the keys that changed, all
/// changeable, or the refusal naming every physical key that changed.
pub fn check_resumed_case(
    stored: &Case,
    case: &Case,
    file: &str,
    step: u64,
    t: f64,
) -> Result<Vec<KeyChange>, PhysicalKeysChanged> {
    let (changeable, physical): (Vec<_>, Vec<_>) = changed_keys(stored, case)
        .into_iter()
        .partition(KeyChange::is_changeable);
    if physical.is_empty() {
        Ok(changeable)
    } else {
        Err(PhysicalKeysChanged {
            file: file.to_string(),
            changes: physical,
            step,
            t,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{named_case, DeviceRequest};

    fn quick() -> Case {
        named_case("quick").unwrap().parse().unwrap()
    }

    /// quick with `from` replaced by `to` in its text.
    fn quick_with(from: &str, to: &str) -> Case {
        let text = named_case("quick").unwrap().text;
        assert!(text.contains(from), "{from}");
        Case::from_toml_str(&text.replace(from, to), "<named case quick>").unwrap()
    }

    fn keys(changes: &[KeyChange]) -> Vec<&str> {
        changes.iter().map(|c| c.key.as_str()).collect()
    }

    #[test]
    fn the_table_of_changeable_keys() {
        for key in [
            "name",
            "description",
            "device",
            "time.t_end",
            "time.max_steps",
            "output.every_steps",
            "output.spectra_times",
            "checkpoint.keep",
            "spectral.device",
            "vortex.device",
            "vortex.snapshot_every_time",
        ] {
            assert!(is_changeable(key), "{key}");
        }
        for key in [
            "flow.nu",
            "initial.kind",
            "initial.rings",
            "time.dt",
            "time.cfl",
            "time.dt_max",
            "spectral.n",
            "spectral.dealias",
            "vortex.n",
            "vortex.evaluator",
            "vortex.accuracy",
            // a key unknown to the table is physical
            "flow.hyperviscosity",
            "outputs.x",
            "output",
            "names",
        ] {
            assert!(!is_changeable(key), "{key}");
        }
    }

    #[test]
    fn a_case_written_out_and_read_back_has_no_changes() {
        // what a run stores in its checkpoints against its case.toml, for every named case
        for named in crate::config::named_cases() {
            let case = named.parse().unwrap();
            let again = Case::from_toml_str(&case.to_toml_string(), "case.toml").unwrap();
            assert_eq!(changed_keys(&case, &again), [], "{}", named.name);
        }
    }

    #[test]
    fn changeable_keys_are_listed_with_both_values() {
        let mut case = quick_with("t_end = 0.5", "t_end = 0.75");
        case.output.cadence = crate::config::Cadence::Steps(2);
        case.set_device(DeviceRequest::Cpu);
        case.name = "other".into();
        let changes = check_resumed_case(&quick(), &case, "case.toml", 10, 0.2).unwrap();
        assert_eq!(
            keys(&changes),
            ["device", "name", "output.every_steps", "time.t_end"]
        );
        let text: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "device: \"auto\" → \"cpu\"",
                "name: \"quick\" → \"other\"",
                "output.every_steps: 1 → 2",
                "time.t_end: 0.5 → 0.75",
            ]
        );
    }

    #[test]
    fn a_physical_key_is_refused_naming_both_values() {
        let case = quick_with("nu = 0.05", "nu = 0.5");
        let e = check_resumed_case(&quick(), &case, "runs/q/case.toml", 120, 1.2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "runs/q/case.toml: [flow] nu = 0.5, but the run was computed with nu = 0.05 up to \
             step 120 (t = 1.2); a physical key cannot change in a resumed run: put it back, or \
             start a new run"
        );
    }

    #[test]
    fn several_physical_keys_one_line_each_and_changeable_ones_do_not_count() {
        let case = quick_with("dt = 0.02", "cfl = 0.5");
        let mut case = Case {
            spectral: case
                .spectral
                .map(|s| crate::config::SpectralConfig { n: 32, ..s }),
            ..case
        };
        case.time.t_end = 0.9;
        let e = check_resumed_case(&quick(), &case, "case.toml", 3, 0.06).unwrap_err();
        assert_eq!(keys(&e.changes), ["spectral.n", "time.cfl", "time.dt"]);
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "case.toml: [spectral] n = 32, but the run was computed with n = 16 up to step 3 \
                 (t = 0.06)",
                "case.toml: [time] cfl = 0.5, but the run was computed without it up to step 3 \
                 (t = 0.06)",
                "case.toml: [time] dt is not set, but the run was computed with dt = 0.02 up to \
                 step 3 (t = 0.06)",
                "physical keys cannot change in a resumed run: put them back, or start a new run",
            ]
        );
    }

    #[test]
    fn a_section_added_is_physical_key_by_key_except_its_device_and_snapshots() {
        let mut case = quick();
        let mut vortex = crate::config::VortexConfig::with_defaults(16);
        vortex.device = Some(DeviceRequest::Cpu);
        vortex.snapshots = Some(crate::config::Cadence::Steps(5));
        case.vortex = Some(vortex);
        let changes = changed_keys(&quick(), &case);
        assert!(changes.iter().all(|c| c.old.is_none()));
        assert!(keys(&changes).contains(&"vortex.n"));
        let changeable: Vec<&str> = changes
            .iter()
            .filter(|c| c.is_changeable())
            .map(|c| c.key.as_str())
            .collect();
        assert_eq!(
            changeable,
            [
                "vortex.device",
                "vortex.dissipation_every",
                "vortex.snapshot_every_steps"
            ]
        );
        assert!(check_resumed_case(&quick(), &case, "c", 0, 0.0).is_err());
        // with only those two keys differing, the resume is accepted
        let mut before = case.clone();
        before.vortex.as_mut().unwrap().device = None;
        before.vortex.as_mut().unwrap().snapshots = None;
        let changes = check_resumed_case(&before, &case, "c", 0, 0.0).unwrap();
        assert_eq!(
            changes.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "vortex.device: not set → \"cpu\"",
                "vortex.snapshot_every_steps: not set → 5"
            ]
        );
    }
}
