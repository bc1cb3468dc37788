//! Case files: every kind of mistake gets a message naming file, line, key and what is allowed;
//! the named cases parse and round-trip through `Case::to_toml_string`.

use std::path::Path;

use vpm::config::{
    named_case, named_cases, resolve_case, Cadence, Case, CaseError, Dealias, DeviceRequest,
    EvaluatorKind, FieldPrecision, InitialCondition, LatticeConditioning, LatticeFilter, RbfSolver,
    TimeControl, TimeStep, VortexConfig,
};
use vpm::kernel::StretchingScheme;

const ORIGIN: &str = "cases/bad.toml";

/// A valid case; the tests replace single lines, so line numbers stay put.
const BASE: &str = r#"# A valid case for the tests.
name = "base"

[flow]
nu = 0.01

[initial]
kind = "taylor-green"

[time]
t_end = 1.0
dt = 0.1

[output]
every_steps = 1
spectra_times = [0.0, 1.0]

[checkpoint]
every_time = 0.5

[spectral]
n = 16
dealias = "3/2"
"#;

/// BASE with 1-based line `line` replaced by `with` (which may be empty).
fn edit(line: usize, with: &str) -> String {
    edits(&[(line, with)])
}

fn edits(changes: &[(usize, &str)]) -> String {
    let mut lines: Vec<String> = BASE.lines().map(str::to_string).collect();
    for &(line, with) in changes {
        lines[line - 1] = with.to_string();
    }
    lines.join("\n") + "\n"
}

/// The error message for `text`, which must fail.
fn error(text: &str) -> String {
    match Case::from_toml_str(text, ORIGIN) {
        Ok(case) => panic!("expected an error, got {case:?}\n--- text:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// Assert that `text` fails with a message that starts with `cases/bad.toml:LINE:` and
/// contains every one of `parts`; returns the message.
fn rejects(text: &str, line: Option<usize>, parts: &[&str]) -> String {
    let message = error(text);
    assert_message(&message, line, parts);
    message
}

/// [`rejects`] for BASE with line `line` replaced by `with`, the error pointing at that line.
fn rejects_edit(line: usize, with: &str, parts: &[&str]) -> String {
    rejects(&edit(line, with), Some(line), parts)
}

/// Assert that `message` starts with `cases/bad.toml:LINE:` and contains every one of `parts`.
fn assert_message(message: &str, line: Option<usize>, parts: &[&str]) {
    let prefix = match line {
        Some(l) => format!("{ORIGIN}:{l}:"),
        None => format!("{ORIGIN}:"),
    };
    assert!(
        message.starts_with(&prefix),
        "message does not start with {prefix:?}: {message}"
    );
    for part in parts {
        assert!(message.contains(part), "message lacks {part:?}: {message}");
    }
}

#[test]
fn base_is_valid() {
    let case = Case::from_toml_str(BASE, ORIGIN).unwrap();
    assert_eq!(case.name, "base");
    assert_eq!(case.spectral.as_ref().unwrap().n, 16);
}

#[test]
fn odd_n() {
    rejects_edit(22, "n = 7", &["`spectral.n`", "= 7", "even integer", "≥ 8"]);
}

#[test]
fn n_below_8_and_above_2048() {
    rejects_edit(22, "n = 6", &["`spectral.n`", "= 6", "even integer", "≥ 8"]);
    rejects_edit(22, "n = 4096", &["`spectral.n`", "= 4096", "≤ 2048"]);
    rejects_edit(22, "n = -16", &["`spectral.n`", "≥ 8"]);
}

#[test]
fn negative_nu() {
    rejects_edit(5, "nu = -0.5", &["`flow.nu`", "= -0.5", "≥ 0"]);
    rejects_edit(5, "nu = inf", &["`flow.nu`", "finite"]);
    rejects_edit(5, "nu = nan", &["`flow.nu`", "finite"]);
}

#[test]
fn t_end_not_positive() {
    for bad in ["t_end = 0.0", "t_end = 0", "t_end = -1.0"] {
        rejects_edit(11, bad, &["`time.t_end`", "> 0"]);
    }
}

#[test]
fn dt_out_of_range() {
    rejects_edit(12, "dt = 2.0", &["`time.dt`", "= 2.0", "> 0", "≤ t_end"]);
    rejects_edit(12, "dt = 0", &["`time.dt`", "> 0"]);
}

#[test]
fn both_dt_and_cfl() {
    rejects(
        &edits(&[(12, "dt = 0.1"), (13, "cfl = 0.5")]),
        Some(13),
        &["[time]", "exactly one of `dt`", "`cfl`", "not both"],
    );
}

#[test]
fn neither_dt_nor_cfl() {
    let m = error(&edit(12, ""));
    // The line of the [time] header.
    assert_message(&m, Some(10), &["[time]", "exactly one of `dt`", "`cfl`"]);
}

#[test]
fn cfl_rules() {
    rejects_edit(12, "cfl = 3.0", &["`time.cfl`", "(0, 2.5]"]);
    rejects(
        &edits(&[(12, "dt = 0.1"), (13, "dt_max = 0.1")]),
        Some(13),
        &["`time.dt_max`", "only allowed with `cfl`"],
    );
    rejects(
        &edits(&[(12, "cfl = 0.5"), (13, "dt_max = -1")]),
        Some(13),
        &["`time.dt_max`", "> 0"],
    );
    let case =
        Case::from_toml_str(&edits(&[(12, "cfl = 0.5"), (13, "dt_max = 0.05")]), ORIGIN).unwrap();
    assert_eq!(
        case.time.step,
        TimeStep::Cfl {
            cfl: 0.5,
            dt_max: Some(0.05)
        }
    );
}

#[test]
fn unknown_key_at_top_level() {
    rejects_edit(
        3,
        "solver = \"fmm\"",
        &["unknown key `solver`", "allowed keys", "name", "spectral"],
    );
}

#[test]
fn unknown_key_in_a_section() {
    rejects_edit(
        5,
        "viscosity = 0.01",
        &["unknown key `flow.viscosity`", "allowed keys in [flow]: nu"],
    );
    rejects_edit(
        23,
        "dealiasing = \"3/2\"",
        &["unknown key `spectral.dealiasing`", "n, dealias"],
    );
    // A key valid for another kind of initial condition.
    rejects_edit(
        9,
        "kp = 4",
        &[
            "unknown key `initial.kp`",
            "kind = \"taylor-green\"",
            "kind, amplitude",
        ],
    );
    // A nested table is an unknown key too.
    rejects(
        &edit(20, "[spectral.extra]"),
        None,
        &["unknown key `spectral.extra`"],
    );
}

#[test]
fn unknown_initial_kind() {
    rejects_edit(
        8,
        "kind = \"tgv\"",
        &[
            "`initial.kind`",
            "\"tgv\"",
            r#""taylor-green", "isotropic", "shear-wave""#,
        ],
    );
}

#[test]
fn bad_dealias() {
    rejects_edit(
        23,
        "dealias = \"1/2\"",
        &["`spectral.dealias`", "\"1/2\"", r#""3/2", "2/3""#],
    );
}

#[test]
fn spectra_time_outside_run() {
    rejects_edit(
        16,
        "spectra_times = [0.0, 1.5]",
        &["`output.spectra_times`", "1.5", "[0, t_end]"],
    );
    rejects_edit(
        16,
        "spectra_times = [-0.5, 1.0]",
        &["`output.spectra_times`", "-0.5", "[0, t_end]"],
    );
    // Reported on the line of the offending element of a multi-line array.
    rejects(
        &edits(&[(16, "spectra_times = [0.0,"), (17, "  2.0]")]),
        Some(17),
        &["`output.spectra_times`", "2.0"],
    );
}

#[test]
fn fields_keys_are_checked() {
    let case = Case::from_toml_str(
        &edit(
            16,
            "fields_times = [1.0, 0, 0.5, 0.5]\nfields_stride = 4\nfields_precision = \"f64\"\n\
             structures_level = 2.5",
        ),
        ORIGIN,
    )
    .unwrap();
    assert_eq!(case.output.fields_times, vec![0.0, 0.5, 1.0]);
    assert_eq!(case.output.fields_stride, 4);
    assert_eq!(case.output.fields_precision, FieldPrecision::F64);
    assert_eq!(case.output.structures_level, 2.5);
    // Defaults: no fields, every node, f32, c = 1.
    let case = Case::from_toml_str(BASE, ORIGIN).unwrap();
    assert!(case.output.fields_times.is_empty());
    assert_eq!(case.output.fields_stride, 1);
    assert_eq!(case.output.fields_precision, FieldPrecision::F32);
    assert_eq!(case.output.structures_level, 1.0);
    rejects_edit(
        16,
        "fields_times = [0.0, 1.5]",
        &["`output.fields_times`", "1.5", "[0, t_end]"],
    );
    for stride in ["3", "0", "16"] {
        rejects_edit(
            16,
            &format!("fields_stride = {stride}"),
            &["`output.fields_stride`", "divides spectral.n = 16"],
        );
    }
    rejects_edit(
        16,
        "fields_precision = \"f16\"",
        &["`output.fields_precision`", "\"f16\"", r#""f32", "f64""#],
    );
    for level in ["0", "-1.0", "nan"] {
        rejects_edit(
            16,
            &format!("structures_level = {level}"),
            &["`output.structures_level`", "> 0"],
        );
    }
}

#[test]
fn spectra_times_sorted_and_deduplicated() {
    let case =
        Case::from_toml_str(&edit(16, "spectra_times = [1.0, 0.5, 0, 0.5]"), ORIGIN).unwrap();
    assert_eq!(case.output.spectra_times, vec![0.0, 0.5, 1.0]);
}

#[test]
fn cadence_rules() {
    rejects_edit(15, "every_steps = 0", &["`output.every_steps`", "≥ 1"]);
    rejects_edit(19, "every_time = -1.0", &["`checkpoint.every_time`", "> 0"]);
    rejects_edit(
        17,
        "every_time = 0.1",
        &["[output]", "`every_steps`", "`every_time`"],
    );
    rejects_edit(20, "keep = 0", &["`checkpoint.keep`", "≥ 1"]);
}

#[test]
fn polarisation_not_perpendicular() {
    let text = r#"[flow]
nu = 0.01
[initial]
kind = "shear-wave"
wavevector = [1, 2, 0]
polarisation = [1.0, 0.0, 0.0]
[time]
t_end = 1.0
dt = 0.1
[spectral]
n = 16
"#;
    rejects(
        text,
        Some(6),
        &[
            "`initial.polarisation`",
            "perpendicular",
            "`wavevector`",
            "1e-12",
        ],
    );
    let zero = text.replace("[1.0, 0.0, 0.0]", "[0.0, 0.0, 0.0]");
    assert_message(
        &error(&zero),
        Some(6),
        &["`initial.polarisation`", "not all zero"],
    );
    let short = text.replace("[1.0, 0.0, 0.0]", "[1.0, 0.0]");
    assert_message(
        &error(&short),
        Some(6),
        &["`initial.polarisation`", "3 elements"],
    );
    let k0 = text.replace("[1, 2, 0]", "[0, 0, 0]");
    assert_message(
        &error(&k0),
        Some(5),
        &["`initial.wavevector`", "not all zero"],
    );
    let k_big = text.replace("[1, 2, 0]", "[8, 0, 0]");
    assert_message(&error(&k_big), Some(5), &["`initial.wavevector`", "< n/2"]);
    let k_float = text.replace("[1, 2, 0]", "[1.0, 2, 0]");
    assert_message(
        &error(&k_float),
        Some(5),
        &["`initial.wavevector`", "element 1", "float", "integer"],
    );
}

#[test]
fn shear_wave_polarisation_normalised_and_defaulted() {
    let text = r#"[flow]
nu = 0.01
[initial]
kind = "shear-wave"
wavevector = [1, 2, 0]
polarisation = [4.0, -2.0, 0.0]
[time]
t_end = 1.0
dt = 0.1
[spectral]
n = 16
"#;
    let check = |case: &Case| {
        let InitialCondition::ShearWave {
            wavevector,
            amplitude,
            polarisation: a,
        } = case.initial
        else {
            panic!("{case:?}")
        };
        assert_eq!(wavevector, [1, 2, 0]);
        assert_eq!(amplitude, 1.0);
        let norm = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt();
        assert!((norm - 1.0).abs() < 1e-15, "{a:?}");
        assert!((a[0] + 2.0 * a[1]).abs() < 1e-15, "{a:?}");
    };
    check(&Case::from_toml_str(text, ORIGIN).unwrap());
    let default = text.replace("polarisation = [4.0, -2.0, 0.0]\n", "");
    check(&Case::from_toml_str(&default, ORIGIN).unwrap());
}

#[test]
fn toml_syntax_error() {
    let m = rejects_edit(22, "n = = 16", &["TOML syntax error"]);
    // file:line:column
    assert!(m.starts_with(&format!("{ORIGIN}:22:5:")), "{m}");
    rejects_edit(3, "[flow", &["TOML syntax error"]);
    rejects_edit(
        6,
        "nu = 0.02",
        &["TOML syntax error", "duplicate key", "nu"],
    );
}

#[test]
fn wrong_type() {
    rejects_edit(
        22,
        "n = \"16\"",
        &[
            "`spectral.n`",
            "expected an integer",
            "found a string",
            "≥ 8",
        ],
    );
    rejects_edit(
        22,
        "n = 16.0",
        &["`spectral.n`", "expected an integer", "found a float"],
    );
    rejects_edit(
        5,
        "nu = \"small\"",
        &["`flow.nu`", "expected a number", "found a string", "≥ 0"],
    );
    rejects_edit(
        8,
        "kind = 3",
        &["`initial.kind`", "expected a string", "taylor-green"],
    );
    rejects_edit(
        16,
        "spectra_times = 1.0",
        &["`output.spectra_times`", "expected an array"],
    );
    rejects_edit(
        16,
        "spectra_times = [0.0, \"end\"]",
        &[
            "`output.spectra_times`",
            "element 2",
            "string",
            "expected a number",
        ],
    );
    let m = error(&edit(3, "flow = 1"));
    // Both `flow = 1` and [flow] define flow: TOML itself rejects that.
    assert!(m.contains("TOML syntax error"), "{m}");
    rejects(
        &edits(&[(4, ""), (5, ""), (3, "flow = 1")]),
        Some(3),
        &["`flow`", "expected a table"],
    );
    // Integers are fine where a number is expected.
    let case = Case::from_toml_str(&edit(11, "t_end = 2"), ORIGIN).unwrap();
    assert_eq!(case.time.t_end, 2.0);
}

#[test]
fn missing_required_key() {
    // Section present: its line is named.
    rejects(
        &edit(5, ""),
        Some(4),
        &["missing key `flow.nu`", "kinematic viscosity", "≥ 0"],
    );
    // Section absent: no line.
    let m = rejects(
        &edits(&[(4, ""), (5, "")]),
        None,
        &["missing key `flow.nu`", "≥ 0"],
    );
    assert!(m.starts_with(&format!("{ORIGIN}: missing key")), "{m}");
    rejects(
        &edit(22, ""),
        Some(21),
        &["missing key `spectral.n`", "even integer ≥ 8"],
    );
    rejects(
        &edit(11, ""),
        Some(10),
        &["missing key `time.t_end`", "> 0"],
    );
    rejects(
        &edit(8, ""),
        Some(7),
        &["missing key `initial.kind`", "taylor-green"],
    );
    rejects(
        &edit(8, "kind = \"isotropic\""),
        Some(7),
        &["missing key `initial.kp`", "> 0"],
    );
    rejects(
        &edits(&[(8, "kind = \"shear-wave\"")]),
        Some(7),
        &["missing key `initial.wavevector`"],
    );
}

#[test]
fn isotropic_rules_and_defaults() {
    let text = edits(&[(8, "kind = \"isotropic\""), (9, "kp = 2")]);
    rejects(&text, Some(7), &["missing key `initial.u0`", "> 0"]);
    let text = edits(&[(8, "kind = \"isotropic\""), (9, "kp = 2"), (6, "")]);
    let text = text.replace("kp = 2\n", "kp = 2\nu0 = 1\n");
    let case = Case::from_toml_str(&text, ORIGIN).unwrap();
    assert_eq!(
        case.initial,
        InitialCondition::Isotropic {
            kp: 2.0,
            u0: 1.0,
            seed: 1,
            k_cut: 6.0
        }
    );
    let bad = text.replace("u0 = 1\n", "u0 = 1\nk_cut = 0.5\n");
    assert_message(&error(&bad), Some(11), &["`initial.k_cut`", "≥ 1"]);
    let bad = text.replace("u0 = 1\n", "u0 = 1\nseed = -3\n");
    assert_message(&error(&bad), Some(11), &["`initial.seed`", "≥ 0"]);
    // The default k_cut = 3·kp beyond what spectral.n = 16 keeps.
    let bad = text.replace("kp = 2\n", "kp = 4\n");
    assert_message(&error(&bad), Some(9), &["`initial.kp`", "3·kp = 12", "≤ 7"]);
    let bad = text.replace("kp = 2\n", "kp = 0\n");
    assert_message(&error(&bad), Some(9), &["`initial.kp`", "> 0"]);
}

#[test]
fn defaults_are_filled_in() {
    let text = r#"[flow]
nu = 0.0
[initial]
kind = "taylor-green"
[time]
t_end = 2.0
dt = 0.5
[spectral]
n = 8
"#;
    let case = Case::from_toml_str(text, "some/dir/my-case.toml").unwrap();
    assert_eq!(case.name, "my-case");
    assert_eq!(case.description, "");
    assert_eq!(
        case.initial,
        InitialCondition::TaylorGreen { amplitude: 1.0 }
    );
    assert_eq!(case.output.cadence, Cadence::Steps(1));
    assert_eq!(case.output.spectra_times, vec![0.0, 2.0]);
    assert_eq!(case.checkpoint.cadence, Cadence::Time(0.2));
    assert_eq!(case.checkpoint.keep, 2);
    assert_eq!(
        case.spectral.as_ref().unwrap().dealias,
        Dealias::ThreeHalves
    );
    assert_eq!(Dealias::TwoThirds.as_str(), "2/3");
    assert_eq!(Dealias::ThreeHalves.as_str(), "3/2");
    // And the resolved text spells every one of them out.
    let resolved = case.to_toml_string();
    for key in [
        "name = \"my-case\"",
        "amplitude = 1.0",
        "every_steps = 1",
        "spectra_times = [0.0, 2.0]",
        "every_time = 0.2",
        "keep = 2",
        "dealias = \"3/2\"",
    ] {
        assert!(resolved.contains(key), "{key} missing from\n{resolved}");
    }
}

#[test]
fn file_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.toml");
    std::fs::write(&path, edit(22, "n = 9")).unwrap();
    let shown = path.display().to_string();
    let m = Case::from_file(&path).unwrap_err().to_string();
    assert!(m.starts_with(&format!("{shown}:22:")), "{m}");
    assert!(m.contains("`spectral.n`"), "{m}");

    let missing = dir.path().join("absent.toml");
    let e = Case::from_file(&missing).unwrap_err();
    assert!(matches!(e, CaseError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("absent.toml"), "{e}");
    // The same through resolve_case (ends in .toml: a path, not a name).
    let e = resolve_case(missing.to_str().unwrap()).unwrap_err();
    assert!(e.to_string().contains("absent.toml"), "{e}");

    // A good file: name from the stem, text returned as read.
    let good = dir.path().join("good-one.toml");
    let text = BASE.replace("name = \"base\"\n", "\n");
    std::fs::write(&good, &text).unwrap();
    let (case, source) = resolve_case(good.to_str().unwrap()).unwrap();
    assert_eq!(case.name, "good-one");
    assert_eq!(source, text);
    assert_eq!(Case::from_file(&good).unwrap(), case);
}

#[test]
fn every_named_case_parses_and_round_trips() {
    let cases = named_cases();
    assert!(cases.len() >= 3, "{cases:?}");
    assert!(cases.windows(2).all(|w| w[0].name < w[1].name));
    for required in ["quick", "tgv-re100", "hit-64"] {
        assert!(named_case(required).is_some(), "{required} missing");
    }
    for named in cases {
        assert!(!named.summary.is_empty() && !named.summary.starts_with('#'));
        let (case, text) = resolve_case(named.name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, named.text);
        assert_eq!(case.name, named.name);
        let resolved = case.to_toml_string();
        let again = Case::from_toml_str(&resolved, "case.toml")
            .unwrap_or_else(|e| panic!("{e}\n{resolved}"));
        assert_eq!(again, case, "{resolved}");
        assert_eq!(again.to_toml_string(), resolved);
        // Also straight from the file on disk.
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("cases")
            .join(format!("{}.toml", named.name));
        assert_eq!(Case::from_file(&path).unwrap(), case);
    }
}

#[test]
fn quick_case_is_as_documented() {
    let case = named_case("quick").unwrap().parse().unwrap();
    assert_eq!(case.spectral.as_ref().unwrap().n, 16);
    assert_eq!(case.spectral.as_ref().unwrap().dealias, Dealias::TwoThirds);
    assert_eq!(case.flow.nu, 0.05);
    assert_eq!(case.time.t_end, 0.5);
    assert_eq!(case.time.step, TimeStep::Fixed { dt: 0.02 });
    assert_eq!(case.output.spectra_times, vec![0.0, 0.5]);
    assert_eq!(case.checkpoint.cadence, Cadence::Steps(10));
}

#[test]
fn unknown_case_name_lists_the_named_cases() {
    let e = resolve_case("no-such-case").unwrap_err();
    let m = e.to_string();
    assert!(m.contains("no-such-case"), "{m}");
    for named in named_cases() {
        assert!(m.contains(named.name), "{m} lacks {}", named.name);
    }
}

#[test]
fn round_trip_of_awkward_values() {
    let text = r#"name = "odd \"quoted\" name"
description = """two
lines with ' and \\ and unicode ε"""
[flow]
nu = 0.1e-3
[initial]
kind = "shear-wave"
wavevector = [3, -1, 2]
amplitude = 0.30000000000000004
polarisation = [1e-300, 3e-300, 0.0]
[time]
t_end = 7e2
cfl = 2.5
dt_max = 1_000.0
[output]
every_time = 0.1
spectra_times = [700, 0.1, 1e-9, 1e-9]
[checkpoint]
every_steps = 9_000_000_000
keep = 17
[spectral]
n = 0x10
dealias = "2/3"
"#;
    let case = Case::from_toml_str(text, ORIGIN).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(case.checkpoint.cadence, Cadence::Steps(9_000_000_000));
    assert_eq!(case.spectral.as_ref().unwrap().n, 16);
    let resolved = case.to_toml_string();
    assert_eq!(
        Case::from_toml_str(&resolved, ORIGIN).unwrap(),
        case,
        "{resolved}"
    );
    assert!(case.validate().is_ok());
}

#[test]
fn bad_name() {
    rejects_edit(2, "name = \"a/b\"", &["`name`", "non-empty"]);
    rejects_edit(2, "name = \"\"", &["`name`", "non-empty"]);
}

/// Deterministic xorshift generator for the mutation loop.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Random mutations of valid case files never panic; what still parses round-trips exactly;
/// every error message starts with the file name.
#[test]
fn mutated_case_files_never_panic() {
    const PIECES: &[&str] = &[
        "=",
        "[",
        "]",
        "\"",
        "'",
        "#",
        "\n",
        ".",
        ",",
        "-",
        "0",
        "1",
        "9",
        "e",
        "_",
        "x",
        "{",
        "}",
        "inf",
        "nan",
        "-0.0",
        "1e308",
        "1e-320",
        "99999999999999999999",
        "\"3/2\"",
        "[initial]",
        "kind = \"shear-wave\"",
        "wavevector = [0, 1, 1]",
        "cfl = 0.5",
        "dt_max = 0.1",
        "every_time = 0.5",
        "ε",
        "\u{0}",
        "true",
        "1979-05-27",
        "[vortex]",
        "reinit_every = \"never\"",
        "rbf = \"exact\"",
        "snapshot_every_steps = 3",
    ];
    let mut sources: Vec<String> = named_cases().iter().map(|c| c.text.to_string()).collect();
    sources.push(BASE.to_string());
    sources.push(with_vortex(EVERY_VORTEX_KEY));
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut parsed = 0;
    for round in 0..6000 {
        let mut chars: Vec<char> = sources[round % sources.len()].chars().collect();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(chars.len() + 1);
            match rng.below(4) {
                0 if at < chars.len() => {
                    let len = 1 + rng.below(8);
                    chars.drain(at..(at + len).min(chars.len()));
                }
                1 => {
                    let piece = PIECES[rng.below(PIECES.len())];
                    chars.splice(at..at, piece.chars());
                }
                2 if at < chars.len() => {
                    let piece = PIECES[rng.below(PIECES.len())];
                    let end = (at + 1 + rng.below(4)).min(chars.len());
                    chars.splice(at..end, piece.chars());
                }
                _ => {
                    // Swap two lines.
                    let text: String = chars.iter().collect();
                    let mut lines: Vec<&str> = text.lines().collect();
                    if lines.len() > 1 {
                        let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
                        lines.swap(a, b);
                    }
                    chars = lines.join("\n").chars().collect();
                }
            }
        }
        let text: String = chars.into_iter().collect();
        match Case::from_toml_str(&text, ORIGIN) {
            Ok(case) => {
                parsed += 1;
                let resolved = case.to_toml_string();
                let again = Case::from_toml_str(&resolved, ORIGIN).unwrap_or_else(|e| {
                    panic!("{e}\n--- resolved:\n{resolved}\n--- from:\n{text}")
                });
                assert_eq!(again, case, "{resolved}");
            }
            Err(e) => {
                let m = e.to_string();
                assert!(m.starts_with(ORIGIN), "{m}");
                assert!(!m.contains('\n'), "multi-line message: {m}");
            }
        }
    }
    assert!(
        parsed > 100,
        "only {parsed} mutants parsed: the loop tests little"
    );
}

/// The annotated examples in cases/README.md are valid.
#[test]
fn readme_examples_parse() {
    let readme = include_str!("../cases/README.md");
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert_eq!(
        blocks.len(),
        4,
        "expected the full example, two [initial] variants and a [vortex] section"
    );
    let full = Case::from_toml_str(blocks[0], "README.md").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(full.name, "tgv-re400");
    assert_eq!(full.vortex, None);
    for variant in &blocks[1..3] {
        let start = blocks[0].find("[initial]").unwrap();
        let end = blocks[0].find("[time]").unwrap();
        let text = format!("{}{variant}\n{}", &blocks[0][..start], &blocks[0][end..]);
        Case::from_toml_str(&text, "README.md").unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
    // The [vortex] example, added to the full example, spells out the defaults (n = spectral.n)
    // and a snapshot cadence.
    let text = format!("{}\n{}", blocks[0], blocks[3]);
    let case = Case::from_toml_str(&text, "README.md").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        case.vortex,
        Some(VortexConfig {
            snapshots: Some(Cadence::Time(1.0)),
            ..VortexConfig::with_defaults(64)
        })
    );
    // The error quoted in the README is the one given.
    let m = error(&with_vortex("rbf = \"exact\"\nrbf_tolerance = 1e-6\n"));
    let (_, message) = m.split_once(": ").unwrap();
    assert!(readme.contains(message), "README does not quote: {message}");
}

// ---- [vortex] ----

/// Line of the first key after `with_vortex`'s `[vortex]` header.
const VORTEX_LINE: usize = 26;

/// BASE with a `[vortex]` section (header on line 25) holding `keys`.
fn with_vortex(keys: &str) -> String {
    format!("{BASE}\n[vortex]\n{keys}")
}

/// [`rejects`] for BASE with a `[vortex]` section of `keys`, the error at its first line.
fn rejects_vortex(keys: &str, parts: &[&str]) -> String {
    rejects(&with_vortex(keys), Some(VORTEX_LINE), parts)
}

/// Every `[vortex]` key, none at its default.
const EVERY_VORTEX_KEY: &str = r#"n = 0x20
overlap = 0.30000000000000004
stretching = "transposed"
reinit_every = "never"
rbf = "cg"
rbf_tolerance = 1e-10
rbf_max_iterations = 1_000
reinit_projection = "none"
reinit_filter = "exponential"
evaluator = "ewald"
accuracy = 1e-12
backend = "cuda"
snapshot_every_time = 0.1
dissipation_every = 3
"#;

/// Parses `text`, checks that its resolved form parses back to the same case and resolves to the
/// same text, and returns the case.
fn round_trip(text: &str) -> Case {
    let case = Case::from_toml_str(text, ORIGIN).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let resolved = case.to_toml_string();
    let again =
        Case::from_toml_str(&resolved, "case.toml").unwrap_or_else(|e| panic!("{e}\n{resolved}"));
    assert_eq!(again, case, "{resolved}");
    // Debug spells every float in its shortest exact form: equal text, equal bits (−0.0 too).
    assert_eq!(format!("{again:?}"), format!("{case:?}"), "{resolved}");
    assert_eq!(again.to_toml_string(), resolved);
    assert!(case.validate().is_ok());
    case
}

#[test]
fn vortex_section_is_optional() {
    let case = round_trip(BASE);
    assert_eq!(case.vortex, None);
    assert!(!case.to_toml_string().contains("[vortex]"));
    // Only the cases that compare both solvers, and the particle-defined ones, have it; gravity
    // cases have neither solver.
    for named in named_cases() {
        let case = named.parse().unwrap();
        let expected = named.name.ends_with("-compare") || case.initial.is_particle_defined();
        assert_eq!(case.vortex.is_some(), expected, "{}", named.name);
        let no_grid = case.initial.is_particle_defined() || case.initial.is_gravity();
        assert_eq!(case.spectral.is_none(), no_grid, "{}", named.name);
        assert_eq!(
            case.gravity.is_some(),
            case.initial.is_gravity(),
            "{}",
            named.name
        );
    }
}

#[test]
fn vortex_defaults() {
    let expected = VortexConfig {
        n: 16,
        overlap: 0.75,
        stretching: StretchingScheme::Classical,
        reinit_every: Some(10),
        rbf: RbfSolver::Spectral,
        conditioning: LatticeConditioning {
            solenoidal: true,
            filter: LatticeFilter::None,
        },
        evaluator: EvaluatorKind::Auto,
        accuracy: 1e-4,
        accuracy_check_every: None,
        device: None,
        snapshots: None,
        dissipation_every: Some(5),
    };
    assert_eq!(VortexConfig::with_defaults(16), expected);
    assert_eq!(RbfSolver::DEFAULT, expected.rbf);
    // An empty section, and an empty inline table.
    let case = round_trip(&with_vortex(""));
    assert_eq!(case.vortex, Some(expected.clone()));
    let case = round_trip(&edit(3, "vortex = {}"));
    assert_eq!(case.vortex, Some(expected.clone()));
    // n follows spectral.n.
    let case = round_trip(&(edit(22, "n = 32") + "[vortex]\n"));
    assert_eq!(case.vortex.unwrap().n, 32);
    // The resolved text spells every default out, and no snapshot key.
    let resolved = round_trip(&with_vortex("")).to_toml_string();
    let section = resolved.split("[vortex]\n").nth(1).unwrap();
    assert_eq!(
        section,
        "n = 16\noverlap = 0.75\nstretching = \"classical\"\nreinit_every = 10\nrbf = \"spectral\"\n\
         reinit_projection = \"solenoidal\"\nreinit_filter = \"none\"\n\
         evaluator = \"auto\"\naccuracy = 0.0001\ndissipation_every = 5\n",
        "{resolved}"
    );
    // Lattice spacing and core radius.
    let v = VortexConfig {
        overlap: 1.5,
        ..expected
    };
    assert_eq!(v.spacing(), std::f64::consts::TAU / 16.0);
    assert_eq!(v.sigma0(), 1.5 * std::f64::consts::TAU / 16.0);
}

#[test]
fn vortex_spellings() {
    assert_eq!(EvaluatorKind::Direct.as_str(), "direct");
    assert_eq!(EvaluatorKind::Ewald.as_str(), "ewald");
    assert_eq!(EvaluatorKind::Auto.as_str(), "auto");
    assert_eq!(DeviceRequest::Auto.to_string(), "auto");
    assert_eq!(DeviceRequest::Cpu.to_string(), "cpu");
    assert_eq!(DeviceRequest::Cuda(None).to_string(), "cuda");
    assert_eq!(DeviceRequest::Cuda(Some(1)).to_string(), "cuda:1");
    assert_eq!(RbfSolver::Exact.as_str(), "exact");
    assert_eq!(RbfSolver::Spectral.as_str(), "spectral");
    assert_eq!(RbfSolver::DEFAULT.as_str(), "spectral");
}

#[test]
fn vortex_round_trip_with_every_key() {
    let case = round_trip(&with_vortex(EVERY_VORTEX_KEY));
    assert_eq!(
        case.vortex,
        Some(VortexConfig {
            n: 32,
            overlap: 0.30000000000000004,
            stretching: StretchingScheme::Transposed,
            reinit_every: None,
            rbf: RbfSolver::ConjugateGradient {
                tolerance: 1e-10,
                max_iterations: 1000,
            },
            conditioning: LatticeConditioning {
                solenoidal: false,
                filter: LatticeFilter::Exponential,
            },
            evaluator: EvaluatorKind::Ewald,
            accuracy: 1e-12,
            accuracy_check_every: None,
            device: Some(DeviceRequest::Cuda(None)),
            snapshots: Some(Cadence::Time(0.1)),
            dissipation_every: Some(3),
        })
    );
    // The other spellings: exact solve, a step count, snapshots in steps, the range ends.
    let case = round_trip(&with_vortex(
        "n = 512\noverlap = 3\nreinit_every = 7\nrbf = \"exact\"\naccuracy = 1e-2\n\
         backend = \"cpu\"\nsnapshot_every_steps = 5\n",
    ));
    let v = case.vortex.unwrap();
    assert_eq!((v.n, v.overlap, v.reinit_every), (512, 3.0, Some(7)));
    assert_eq!((v.rbf, v.accuracy), (RbfSolver::Exact, 1e-2));
    assert_eq!(v.device, Some(DeviceRequest::Cpu));
    assert_eq!(v.snapshots, Some(Cadence::Steps(5)));
    let case = round_trip(&with_vortex(
        "n = 8\nrbf_tolerance = 1e-2\nrbf_max_iterations = 1\n",
    ));
    assert_eq!(
        case.vortex.unwrap().rbf,
        RbfSolver::ConjugateGradient {
            tolerance: 1e-2,
            max_iterations: 1
        }
    );
    // A case built in code passes the same checks.
    let mut case = round_trip(BASE);
    case.vortex = Some(VortexConfig {
        reinit_every: None,
        rbf: RbfSolver::Exact,
        snapshots: Some(Cadence::Steps(1)),
        ..VortexConfig::with_defaults(64)
    });
    assert!(case.validate().is_ok());
    case.vortex = Some(VortexConfig {
        overlap: 0.0,
        ..VortexConfig::with_defaults(64)
    });
    let m = case.validate().unwrap_err().to_string();
    assert!(m.contains("`vortex.overlap`"), "{m}");
}

#[test]
fn vortex_bad_n() {
    rejects_vortex(
        "n = 15\n",
        &["`vortex.n`", "= 15", "even integer", "≥ 8", "≤ 512"],
    );
    rejects_vortex("n = 1024\n", &["`vortex.n`", "= 1024", "≤ 512"]);
    rejects_vortex("n = 6\n", &["`vortex.n`", "≥ 8"]);
    rejects_vortex(
        "n = 16.0\n",
        &["`vortex.n`", "expected an integer", "found a float"],
    );
    // The default, spectral.n, too large for the particles: the [vortex] header is named.
    rejects(
        &(edit(22, "n = 1024") + "\n[vortex]\n"),
        Some(25),
        &["missing key `vortex.n`", "spectral.n = 1024", "≤ 512"],
    );
}

#[test]
fn vortex_bad_overlap() {
    for bad in [
        "overlap = 0",
        "overlap = 0.0",
        "overlap = -1",
        "overlap = 3.5",
        "overlap = nan",
    ] {
        rejects(
            &with_vortex(&format!("{bad}\n")),
            Some(VORTEX_LINE),
            &["`vortex.overlap`", "σ0 = overlap · h", "> 0", "≤ 3"],
        );
    }
    rejects(
        &with_vortex("overlap = \"1\"\n"),
        Some(VORTEX_LINE),
        &["`vortex.overlap`", "expected a number", "found a string"],
    );
}

#[test]
fn vortex_bad_stretching() {
    rejects(
        &with_vortex("stretching = \"symmetric\"\n"),
        Some(VORTEX_LINE),
        &[
            "`vortex.stretching`",
            "\"symmetric\"",
            r#"must be one of "classical", "transposed""#,
        ],
    );
    // Spellings are exact.
    rejects(
        &with_vortex("stretching = \"Classical\"\n"),
        Some(VORTEX_LINE),
        &["`vortex.stretching`"],
    );
}

#[test]
fn vortex_bad_reinit_every() {
    rejects_vortex(
        "reinit_every = 0\n",
        &["`vortex.reinit_every`", "= 0", "integer ≥ 1", "\"never\""],
    );
    rejects_vortex(
        "reinit_every = -5\n",
        &["`vortex.reinit_every`", "integer ≥ 1"],
    );
    rejects_vortex(
        "reinit_every = \"always\"\n",
        &["`vortex.reinit_every`", "\"always\"", "\"never\""],
    );
    rejects_vortex(
        "reinit_every = 2.5\n",
        &[
            "`vortex.reinit_every`",
            "expected an integer or the string \"never\"",
            "found a float",
        ],
    );
    rejects_vortex(
        "reinit_every = 99999999999999999999\n",
        &["`vortex.reinit_every`", "out of range"],
    );
}

#[test]
fn vortex_dissipation_every() {
    // The default spans at least 50 steps of reinitialisations; 1 without them.
    let every = |keys: &str| {
        round_trip(&with_vortex(keys))
            .vortex
            .unwrap()
            .dissipation_every
    };
    assert_eq!(every(""), Some(5));
    assert_eq!(every("reinit_every = 5\n"), Some(10));
    assert_eq!(every("reinit_every = 7\n"), Some(8));
    assert_eq!(every("reinit_every = 100\n"), Some(1));
    assert_eq!(every("reinit_every = \"never\"\n"), Some(1));
    assert_eq!(every("dissipation_every = 1\n"), Some(1));
    rejects_vortex(
        "dissipation_every = 0\n",
        &["`vortex.dissipation_every`", "= 0", "integer ≥ 1"],
    );
    rejects_vortex(
        "dissipation_every = 2.5\n",
        &["`vortex.dissipation_every`", "found a float"],
    );
    // The particle-defined flows have no grid to measure on: none, and the key refused.
    assert_eq!(round_trip(RING).vortex.unwrap().dissipation_every, None);
    let m = error(&format!("{RING}dissipation_every = 2\n"));
    assert!(
        m.starts_with("cases/bad.toml:19:")
            && m.contains("`vortex.dissipation_every`")
            && m.contains("no spectral grid"),
        "{m}"
    );
}

#[test]
fn vortex_bad_reinit_conditioning() {
    rejects_vortex(
        "reinit_projection = \"helmholtz\"\n",
        &[
            "`vortex.reinit_projection`",
            "\"helmholtz\"",
            r#""solenoidal", "none""#,
        ],
    );
    rejects_vortex(
        "reinit_filter = true\n",
        &["`vortex.reinit_filter`", r#""exponential", "none""#],
    );
}

#[test]
fn vortex_bad_rbf() {
    rejects_vortex(
        "rbf = \"lu\"\n",
        &["`vortex.rbf`", "\"lu\"", r#""spectral", "exact", "cg""#],
    );
    // CG-only keys with the exact solve: both keys named, on the line of the CG-only key.
    let m = error(&with_vortex("rbf = \"exact\"\nrbf_tolerance = 1e-6\n"));
    assert_eq!(
        m,
        format!(
            "{ORIGIN}:{}: key `vortex.rbf_tolerance` = 1e-6: only allowed with `vortex.rbf` = \
             \"cg\" (conjugate gradients); with rbf = \"spectral\" or \"exact\" leave it out",
            VORTEX_LINE + 1
        )
    );
    rejects_vortex(
        "rbf_max_iterations = 50\nrbf = \"exact\"\n",
        &["`vortex.rbf_max_iterations`", "`vortex.rbf`", "\"exact\""],
    );
    // Both: the first in the file.
    rejects_vortex(
        "rbf_max_iterations = 50\nrbf_tolerance = 1e-6\nrbf = \"exact\"\n",
        &["`vortex.rbf_max_iterations`", "\"exact\""],
    );
    for bad in [
        "rbf_tolerance = 0",
        "rbf_tolerance = 0.1",
        "rbf_tolerance = -1e-8",
    ] {
        rejects_vortex(
            &format!("{bad}\n"),
            &["`vortex.rbf_tolerance`", "> 0", "≤ 1e-2"],
        );
    }
    rejects_vortex(
        "rbf_max_iterations = 0\n",
        &["`vortex.rbf_max_iterations`", "integer ≥ 1"],
    );
}

#[test]
fn vortex_bad_evaluator_accuracy_backend() {
    rejects_vortex(
        "evaluator = \"fast\"\n",
        &[
            "`vortex.evaluator`",
            "\"fast\"",
            r#"must be one of "direct", "ewald", "fmm""#,
        ],
    );
    rejects_vortex(
        "evaluator = 1\n",
        &["`vortex.evaluator`", "expected a string", "\"direct\""],
    );
    for bad in [
        "accuracy = 1e-13",
        "accuracy = 0.1",
        "accuracy = 0",
        "accuracy = inf",
    ] {
        rejects_vortex(
            &format!("{bad}\n"),
            &["`vortex.accuracy`", "≥ 1e-12", "≤ 1e-2"],
        );
    }
    rejects_vortex(
        "backend = \"opencl\"\n",
        &[
            "`vortex.backend`",
            "\"opencl\"",
            r#""auto", "cpu", "cuda" or "cuda:N""#,
        ],
    );
}

#[test]
fn vortex_bad_snapshots() {
    rejects_vortex(
        "snapshot_every_steps = 0\n",
        &["`vortex.snapshot_every_steps`", "≥ 1"],
    );
    rejects_vortex(
        "snapshot_every_time = -1.0\n",
        &["`vortex.snapshot_every_time`", "> 0"],
    );
    rejects(
        &with_vortex("snapshot_every_steps = 2\nsnapshot_every_time = 0.5\n"),
        Some(VORTEX_LINE + 1),
        &[
            "[vortex]",
            "at most one of `snapshot_every_steps`",
            "`snapshot_every_time`",
            "not both",
        ],
    );
}

#[test]
fn vortex_unknown_keys_and_types() {
    rejects(
        &with_vortex("overlap = 1.0\nsigma0 = 0.1\n"),
        Some(VORTEX_LINE + 1),
        &[
            "unknown key `vortex.sigma0`",
            "allowed keys in [vortex]: n, overlap, stretching, reinit_every, rbf, \
             rbf_tolerance, rbf_max_iterations, reinit_projection, reinit_filter, evaluator, \
             accuracy, accuracy_check_every, device, backend, snapshot_every_steps, \
             snapshot_every_time",
        ],
    );
    // The time step is [time]'s: there is no vortex.time_step, nor the [output] cadence keys.
    rejects(
        &with_vortex("time_step = \"same\"\n"),
        Some(VORTEX_LINE),
        &["unknown key `vortex.time_step`"],
    );
    rejects(
        &with_vortex("every_steps = 1\n"),
        Some(VORTEX_LINE),
        &["unknown key `vortex.every_steps`"],
    );
    rejects(
        &with_vortex("[vortex.ewald]\n"),
        None,
        &["unknown key `vortex.ewald`"],
    );
    // Not a table.
    rejects_edit(3, "vortex = 1", &["`vortex`", "expected a table"]);
    // And it is a top-level key now.
    rejects_edit(
        3,
        "solver = \"fmm\"",
        &["unknown key `solver`", "spectral, vortex"],
    );
}

/// A valid particle-defined case: the vortex ring of `cases/ring.toml`, smaller.
const RING: &str = r#"[flow]
nu = 0.0

[initial]
kind = "vortex-ring"
radius = 1.0
circulation = 1.0
core = 0.1

[time]
t_end = 0.1
dt = 0.025

[output]
every_time = 0.05

[vortex]
n = 104
"#;

/// RING with the text `from` replaced by `to` (which must occur once).
fn ring_with(from: &str, to: &str) -> String {
    assert_eq!(RING.matches(from).count(), 1, "{from}");
    RING.replace(from, to)
}

#[test]
fn particle_defined_kinds_parse_with_their_defaults() {
    let case = round_trip(RING);
    assert_eq!(
        case.initial,
        InitialCondition::VortexRing {
            radius: 1.0,
            circulation: 1.0,
            core: 0.1
        }
    );
    assert!(case.spectral.is_none());
    let v = case.vortex.unwrap();
    // Free space: all pairs, no lattice to reinitialise on.
    assert_eq!(
        (v.n, v.evaluator, v.reinit_every),
        (104, EvaluatorKind::Direct, None)
    );
    let tube = RING.replace(
        "kind = \"vortex-ring\"\nradius = 1.0\ncirculation = 1.0\ncore = 0.1",
        "kind = \"vortex-tube\"\ncirculation = -2\ncore = 0.3",
    );
    let case = round_trip(&tube.replace("n = 104", "n = 32"));
    assert_eq!(
        case.initial,
        InitialCondition::VortexTube {
            circulation: -2.0,
            core: 0.3
        }
    );
    // The periodic tube keeps the periodic defaults.
    let v = case.vortex.unwrap();
    assert_eq!(
        (v.evaluator, v.reinit_every),
        (EvaluatorKind::Auto, Some(10))
    );
}

#[test]
fn particle_defined_kinds_refuse_spectral_settings() {
    rejects(
        &format!("{RING}\n[spectral]\nn = 16\n"),
        Some(20),
        &["[spectral]", "\"vortex-ring\"", "remove [spectral]"],
    );
    rejects(
        &ring_with(
            "every_time = 0.05",
            "every_time = 0.05\nspectra_times = [0.0]",
        ),
        Some(16),
        &["`output.spectra_times`", "no energy spectra"],
    );
    rejects(
        &ring_with(
            "every_time = 0.05",
            "every_time = 0.05\nfields_times = [0.0]",
        ),
        Some(16),
        &["`output.fields_times`", "no grid fields", "remove the key"],
    );
}

#[test]
fn particle_defined_kinds_need_vortex_n() {
    rejects(
        &ring_with("[vortex]\nn = 104\n", ""),
        None,
        &["missing section [vortex]", "\"vortex-ring\"", "`n`"],
    );
    rejects(
        &ring_with("n = 104", "overlap = 0.5"),
        None,
        &["`vortex.n`", "2π/n"],
    );
}

#[test]
fn ring_parameters_are_checked() {
    rejects(
        &ring_with("radius = 1.0", "radius = -1.0"),
        Some(6),
        &["`initial.radius`", "> 0"],
    );
    rejects(
        &ring_with("circulation = 1.0", "circulation = 0"),
        Some(7),
        &["`initial.circulation`", "≠ 0"],
    );
    rejects(
        &ring_with("core = 0.1", "core = 0.5"),
        Some(8),
        &["`initial.core`", "< radius/2"],
    );
    rejects(&ring_with("core = 0.1\n", ""), None, &["`initial.core`"]);
    // The blobs must be narrower than the core they sample: σ_p = 2π/40 = 0.157 ≥ 0.09.
    rejects(
        &ring_with("n = 104", "n = 40"),
        Some(18),
        &["`vortex.n`", "0.9 × initial.core", "raise n"],
    );
    rejects(
        &ring_with("n = 104", "n = 104\noverlap = 2"),
        Some(19),
        &["`vortex.overlap`", "0.9 × initial.core"],
    );
}

#[test]
fn ring_is_free_space_and_the_box_is_periodic() {
    rejects(
        &ring_with("n = 104", "n = 104\nevaluator = \"ewald\""),
        Some(19),
        &["`vortex.evaluator`", "free space", "\"direct\""],
    );
    rejects(
        &ring_with("n = 104", "n = 104\nreinit_every = 5"),
        Some(19),
        &["`vortex.reinit_every`", "\"never\""],
    );
    // Never is allowed (it is the default).
    round_trip(&ring_with("n = 104", "n = 104\nreinit_every = \"never\""));
    rejects(
        &with_vortex("evaluator = \"direct\"\n"),
        Some(26),
        &[
            "`vortex.evaluator`",
            "periodic box needs \"auto\" (the default), \"ewald\" or \"fmm\"",
        ],
    );
}

#[test]
fn fmm_runs_in_free_space_with_its_accuracy_and_checks() {
    // The ring with the FMM: accuracy 1e-4 and a check every 100 evaluations by default, both
    // written out in the resolved case.
    let case = round_trip(&ring_with("n = 104", "n = 104\nevaluator = \"fmm\""));
    let v = case.vortex.clone().unwrap();
    assert_eq!(
        (v.evaluator, v.accuracy, v.accuracy_check_every),
        (EvaluatorKind::Fmm, 1e-4, Some(100))
    );
    assert_eq!(v.evaluator_options().check_every, 100);
    let resolved = case.to_toml_string();
    assert!(
        resolved.contains("evaluator = \"fmm\"\naccuracy = 0.0001\naccuracy_check_every = 100\n"),
        "{resolved}"
    );
    // Explicit values, 0 (only the first evaluation) included.
    let case = round_trip(&ring_with(
        "n = 104",
        "n = 104\nevaluator = \"fmm\"\naccuracy = 1e-4\naccuracy_check_every = 0",
    ));
    let v = case.vortex.unwrap();
    assert_eq!((v.accuracy, v.accuracy_check_every), (1e-4, Some(0)));
    assert_eq!(v.evaluator_options().check_every, 0);
    // The other evaluators have no check: no key in the resolved case, and none allowed.
    assert!(!round_trip(RING)
        .to_toml_string()
        .contains("accuracy_check_every"));
    assert_eq!(round_trip(RING).vortex.unwrap().accuracy_check_every, None);
}

#[test]
fn fmm_keys_are_checked() {
    // The periodic box has the FMM (CPU) and "auto": the tube and a field-defined flow.
    let case = round_trip(&with_vortex("evaluator = \"fmm\"\n"));
    let v = case.vortex.unwrap();
    assert_eq!(
        (v.evaluator, v.accuracy_check_every),
        (EvaluatorKind::Fmm, Some(100))
    );
    let case = round_trip(&with_vortex(
        "evaluator = \"auto\"\naccuracy_check_every = 7\n",
    ));
    assert_eq!(case.vortex.unwrap().accuracy_check_every, Some(7));
    let tube = RING.replace(
        "kind = \"vortex-ring\"\nradius = 1.0\ncirculation = 1.0\ncore = 0.1",
        "kind = \"vortex-tube\"\ncirculation = 1\ncore = 0.3",
    );
    round_trip(&tube.replace("n = 104", "n = 32\nevaluator = \"fmm\""));
    // "auto" in free space (the direct sum) is spelled as given.
    let v = round_trip(&ring_with("n = 104", "n = 104\nevaluator = \"auto\"")).vortex;
    assert_eq!(v.unwrap().evaluator, EvaluatorKind::Auto);
    // An accuracy finer than the FMM is planned for, and a bad check cadence.
    use vpm::summation::fmm::params::{CPU_ACCURACY_FLOOR, GPU_ACCURACY_FLOOR};
    let (cpu, gpu) = (
        format!("≥ {CPU_ACCURACY_FLOOR:e}"),
        format!("{GPU_ACCURACY_FLOOR:e}"),
    );
    rejects(
        &ring_with("n = 104", "n = 104\nevaluator = \"fmm\"\naccuracy = 1e-12"),
        Some(20),
        &["`vortex.accuracy` = 1e-12", "\"fmm\"", &cpu, &gpu],
    );
    // The same accuracy is fine for Ewald (its range is the general one).
    round_trip(&with_vortex("accuracy = 1e-12\n"));
    for bad in ["-1", "1.5", "\"often\""] {
        rejects(
            &ring_with(
                "n = 104",
                &format!("n = 104\nevaluator = \"fmm\"\naccuracy_check_every = {bad}"),
            ),
            Some(20),
            &["`vortex.accuracy_check_every`", "integer ≥ 0"],
        );
    }
    // Only with the FMM: the ring's default (direct), direct given, and the box (Ewald).
    rejects(
        &ring_with("n = 104", "n = 104\naccuracy_check_every = 10"),
        Some(19),
        &[
            "`vortex.accuracy_check_every` = 10",
            "only allowed with `vortex.evaluator` = \"fmm\"",
        ],
    );
    rejects(
        &ring_with(
            "n = 104",
            "n = 104\nevaluator = \"direct\"\naccuracy_check_every = 10",
        ),
        Some(20),
        &["`vortex.accuracy_check_every`", "only allowed with"],
    );
    rejects(
        &with_vortex("evaluator = \"ewald\"\naccuracy_check_every = 1\n"),
        Some(VORTEX_LINE + 1),
        &["`vortex.accuracy_check_every`", "\"fmm\" or \"auto\""],
    );
    // A case built in code passes the same checks.
    let mut case = round_trip(RING);
    let v = case.vortex.as_mut().unwrap();
    v.accuracy_check_every = Some(3);
    let m = case.validate().unwrap_err().to_string();
    assert!(m.contains("`vortex.accuracy_check_every`"), "{m}");
    case.vortex.as_mut().unwrap().evaluator = EvaluatorKind::Fmm;
    assert!(case.validate().is_ok());
}

// --- device, time.max_steps and the step limit --------------------------------------------

/// The spellings of a device request and what they mean.
const DEVICES: &[(&str, DeviceRequest)] = &[
    ("auto", DeviceRequest::Auto),
    ("cpu", DeviceRequest::Cpu),
    ("cuda", DeviceRequest::Cuda(None)),
    ("cuda:0", DeviceRequest::Cuda(Some(0))),
    ("cuda:2", DeviceRequest::Cuda(Some(2))),
];

/// Spellings that are not device requests.
const BAD_DEVICES: &[&str] = &[
    "gpu",
    "CUDA",
    "cuda:",
    "cuda:x",
    "cuda:-1",
    "cuda:12345",
    "",
];

/// BASE with `key = value` appended to `[spectral]` (line 24).
fn with_spectral_key(key_value: &str) -> String {
    format!("{BASE}{key_value}\n")
}

#[test]
fn device_defaults_to_auto_and_no_section_override() {
    let case = round_trip(&with_vortex(""));
    assert_eq!(case.device, DeviceRequest::Auto);
    assert_eq!(case.spectral.unwrap().device, None);
    assert_eq!(case.vortex.unwrap().device, None);
}

#[test]
fn device_spellings_at_every_level() {
    for &(spelling, want) in DEVICES {
        let line = format!("device = \"{spelling}\"");
        let case = round_trip(&edit(3, &line));
        assert_eq!(case.device, want, "{line}");
        let case = round_trip(&with_spectral_key(&line));
        assert_eq!(case.spectral.unwrap().device, Some(want), "{line}");
        assert_eq!(case.device, DeviceRequest::Auto);
        let case = round_trip(&with_vortex(&format!("{line}\n")));
        assert_eq!(case.vortex.unwrap().device, Some(want), "{line}");
        // `backend` is the older name of the vortex `device`, written back as `device`.
        let case = round_trip(&with_vortex(&format!("backend = \"{spelling}\"\n")));
        assert_eq!(case.vortex.as_ref().unwrap().device, Some(want));
        let resolved = case.to_toml_string();
        assert!(
            resolved.contains(&line) && !resolved.contains("backend"),
            "{resolved}"
        );
    }
}

#[test]
fn bad_device_spellings_name_the_key_and_the_allowed_list() {
    for bad in BAD_DEVICES {
        let line = format!("device = \"{bad}\"");
        let parts = |key: &'static str| [key, DeviceRequest::ALLOWED];
        rejects_edit(3, &line, &parts("`device`"));
        rejects(
            &with_spectral_key(&line),
            Some(24),
            &parts("`spectral.device`"),
        );
        rejects_vortex(&format!("{line}\n"), &parts("`vortex.device`"));
        rejects_vortex(
            &format!("backend = \"{bad}\"\n"),
            &parts("`vortex.backend`"),
        );
    }
    let m = rejects_edit(3, "device = \"gpu\"", &["\"gpu\""]);
    assert!(m.contains(r#""auto", "cpu", "cuda" or "cuda:N""#), "{m}");
    // Wrong type.
    rejects_edit(
        3,
        "device = 0",
        &["`device`", "expected a string", "\"cuda:N\""],
    );
    rejects(
        &with_spectral_key("device = true"),
        Some(24),
        &["`spectral.device`", "expected a string"],
    );
}

#[test]
fn vortex_device_and_backend_together_is_an_error() {
    const BOTH: &str = "`backend` is the older name of `device`: give one of them, not both";
    // The error points at the `backend` line, wherever it stands.
    for (keys, line) in [
        ("device = \"cpu\"\nbackend = \"cpu\"\n", VORTEX_LINE + 1),
        ("backend = \"cuda\"\ndevice = \"cuda:1\"\n", VORTEX_LINE),
    ] {
        rejects(&with_vortex(keys), Some(line), &["`vortex.backend`", BOTH]);
    }
}

#[test]
fn max_steps_valid_absent_and_invalid() {
    assert_eq!(round_trip(BASE).time.max_steps, None);
    let case = round_trip(&edit(13, "max_steps = 1_000"));
    assert_eq!(case.time.max_steps, Some(1000));
    assert!(case.to_toml_string().contains("max_steps = 1000\n"));
    assert_eq!(
        round_trip(&edit(13, "max_steps = 1")).time.max_steps,
        Some(1)
    );
    const RULE: &str = "integer ≥ 1";
    for bad in ["max_steps = 0", "max_steps = -5"] {
        rejects_edit(13, bad, &["`time.max_steps`", RULE]);
    }
    rejects_edit(
        13,
        "max_steps = \"10\"",
        &[
            "`time.max_steps`",
            "expected an integer",
            "found a string",
            RULE,
        ],
    );
    rejects_edit(
        13,
        "max_steps = 10.0",
        &["`time.max_steps`", "expected an integer", "found a float"],
    );
}

#[test]
fn too_many_fixed_steps_are_refused() {
    let m = rejects(
        &edits(&[(11, "t_end = 2e9"), (12, "dt = 1.0")]),
        Some(12),
        &[
            "`time.dt`",
            "t_end / dt = 2000000000 / 1 = 2.000e9 steps",
            "more than the 1e9 a run may take",
            "raise dt or shorten t_end",
        ],
    );
    assert!(!m.contains("max_steps"), "{m}");
    // Exactly the limit is allowed; an adaptive step is not counted in advance.
    let case = round_trip(&edits(&[(11, "t_end = 1e9"), (12, "dt = 1.0")]));
    assert_eq!(case.time.t_end / 1.0, TimeControl::MAX_FIXED_STEPS);
    round_trip(&edits(&[(11, "t_end = 1e12"), (12, "cfl = 0.5")]));
}

// --- the resolved case through serde -------------------------------------------------------

/// Every key of every section set, none at its default.
fn every_key_case() -> String {
    format!(
        "name = \"all\"\ndescription = \"every key\"\ndevice = \"cuda:2\"\n\
         [flow]\nnu = 1e-3\n\
         [initial]\nkind = \"isotropic\"\nkp = 4.5\nu0 = 0.7\nseed = 99\nk_cut = 7.25\n\
         [time]\nt_end = 2.0\ncfl = 0.4\ndt_max = 0.01\nmax_steps = 12345\n\
         [output]\nevery_time = 0.125\nspectra_times = [0.0, 0.5, 2.0]\n\
         [checkpoint]\nevery_steps = 50\nkeep = 3\n\
         [spectral]\nn = 32\ndealias = \"2/3\"\ndevice = \"cpu\"\n\
         [vortex]\n{EVERY_VORTEX_KEY}"
    )
}

#[test]
fn resolved_case_with_every_key_round_trips() {
    let case = round_trip(&every_key_case());
    assert_eq!(case.device, DeviceRequest::Cuda(Some(2)));
    assert_eq!(case.time.max_steps, Some(12345));
    assert_eq!(
        case.time.step,
        TimeStep::Cfl {
            cfl: 0.4,
            dt_max: Some(0.01)
        }
    );
    assert_eq!(
        case.spectral.as_ref().unwrap().device,
        Some(DeviceRequest::Cpu)
    );
    let v = case.vortex.as_ref().unwrap();
    assert!(v.device.is_some() && v.snapshots.is_some() && v.reinit_every.is_none());
    let resolved = case.to_toml_string();
    assert!(resolved.starts_with("# Resolved case: every key with its value"));
    for line in [
        "device = \"cuda:2\"",
        "kind = \"isotropic\"",
        "every_time = 0.125",
        "every_steps = 50",
        "dt_max = 0.01",
        "reinit_every = \"never\"",
        "rbf = \"cg\"",
        "snapshot_every_time = 0.1",
    ] {
        assert!(resolved.contains(line), "{line} missing from\n{resolved}");
    }
    // The table order of the case-file layout, top-level keys first.
    let order: Vec<usize> = [
        "\nname = ",
        "\ndevice = ",
        "[flow]",
        "[initial]",
        "[time]",
        "[output]",
        "[checkpoint]",
        "[spectral]",
        "[vortex]",
    ]
    .iter()
    .map(|h| resolved.find(h).unwrap_or_else(|| panic!("{h} missing")))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{resolved}");
}

#[test]
fn resolved_case_with_each_optional_key_absent_round_trips() {
    let base = round_trip(&with_vortex("")).to_toml_string();
    for absent in ["max_steps", "dt_max", "backend", "snapshot_every"] {
        assert!(!base.contains(absent), "{absent} in\n{base}");
    }
    // The run-level device is always written; the section overrides only when set.
    assert_eq!(base.matches("device = ").count(), 1, "{base}");
    // cfl without dt_max; the exact RBF solve (no tolerance keys); reinit on a step count.
    let text = edits(&[(12, "cfl = 0.5")]) + "[vortex]\nrbf = \"exact\"\nreinit_every = 3\n";
    let case = round_trip(&text);
    let resolved = case.to_toml_string();
    assert!(
        !resolved.contains("dt_max") && !resolved.contains("rbf_tolerance"),
        "{resolved}"
    );
    assert!(resolved.contains("reinit_every = 3\n"), "{resolved}");
    // No [vortex], no [spectral] (particle-defined: no spectra_times either).
    assert!(!round_trip(BASE).to_toml_string().contains("[vortex]"));
    let ring = round_trip(RING).to_toml_string();
    assert!(
        !ring.contains("[spectral]") && !ring.contains("spectra_times"),
        "{ring}"
    );
}

#[test]
fn cases_built_in_code_round_trip_bit_exactly() {
    let mut case = round_trip(&every_key_case());
    case.flow.nu = -0.0 + 0.0; // +0
    case.time.t_end = 1.0 + f64::EPSILON;
    case.output.spectra_times = vec![0.0, 5e-324, 1.0 / 3.0, 0.1 + 0.2];
    case.description = "quotes \" and \\ and\nnew lines, tabs\t, unicode ε".into();
    case.name = "odd 'name'".into();
    round_trip(&case.to_toml_string());
}

#[test]
fn vortex_rbf_defaults_to_spectral_and_old_cg_keys_keep_conjugate_gradients() {
    let case = round_trip(&with_vortex(""));
    assert_eq!(case.vortex.unwrap().rbf, RbfSolver::Spectral);
    // A case written when conjugate gradients were the default, with their keys and no `rbf`.
    let case = round_trip(&with_vortex("rbf_tolerance = 1e-6\n"));
    assert_eq!(
        case.vortex.unwrap().rbf,
        RbfSolver::ConjugateGradient {
            tolerance: 1e-6,
            max_iterations: RbfSolver::DEFAULT_MAX_ITERATIONS
        }
    );
}

/// Several GPUs: `"cuda:all"` and lists run the spectral solver across GPUs (a compare case
/// keeps its particles on rank 0's GPU); a GPU named twice, and a group for a solver that runs
/// on one device, are refused naming the file, the line and the key.
#[test]
fn device_groups_for_the_spectral_solver_and_their_errors() {
    use vpm::device::GpuSelection;
    for (spelling, want) in [
        ("cuda:all", DeviceRequest::CudaGroup(GpuSelection::All)),
        (
            "cuda:0,1,2,3",
            DeviceRequest::CudaGroup(GpuSelection::Mask(0b1111)),
        ),
        (
            "cuda:3,1",
            DeviceRequest::CudaGroup(GpuSelection::Mask(0b1010)),
        ),
    ] {
        let line = format!("device = \"{spelling}\"");
        assert_eq!(round_trip(&edit(3, &line)).device, want, "{line}");
        let case = round_trip(&with_spectral_key(&line));
        assert_eq!(case.spectral.unwrap().device, Some(want), "{line}");
        let compare = round_trip(&format!("{}\n[vortex]\n", edit(3, &line)));
        assert_eq!(compare.device, want);
        assert!(compare.vortex.is_some());
    }
    let twice = "device = \"cuda:0,1,1\"";
    let parts = |key| [key, "GPU 1 is named twice"];
    rejects_edit(3, twice, &parts("`device`"));
    rejects(
        &with_spectral_key(twice),
        Some(24),
        &parts("`spectral.device`"),
    );
    rejects_edit(
        3,
        "device = \"cuda:0,64\"",
        &["`device`", "GPU 64 is beyond"],
    );
    for bad in ["cuda:0,", "cuda:,1", "cuda:all,1"] {
        rejects_edit(
            3,
            &format!("device = \"{bad}\""),
            &["`device`", DeviceRequest::ALLOWED],
        );
    }
    const ONE_DEVICE: &str = "which runs on one device: only the spectral solver runs across GPUs";
    for key in ["device", "backend"] {
        rejects_vortex(
            &format!("{key} = \"cuda:all\"\n"),
            &[
                &format!("`vortex.{key}`"),
                "several GPUs for the particle solver ([vortex])",
                ONE_DEVICE,
            ],
        );
    }
    // A particle-defined flow has no spectral solver: the run-level group is the particles'.
    let case_file = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("cases")
            .join(name);
        std::fs::read_to_string(path).unwrap()
    };
    let ring = case_file("ring.toml");
    rejects(
        &format!("device = \"cuda:all\"\n{ring}"),
        Some(1),
        &["`device`", "the particle solver", ONE_DEVICE],
    );
    // Gravity runs on one device, at the top level and in [gravity].
    let plummer = case_file("plummer.toml");
    rejects(
        &format!("device = \"cuda:0,1\"\n{plummer}"),
        Some(1),
        &["`device`", "the gravity solver", ONE_DEVICE],
    );
    let in_section = plummer.replace("[gravity]\n", "[gravity]\ndevice = \"cuda:all\"\n");
    assert_ne!(in_section, plummer);
    rejects(
        &in_section,
        Some(29),
        &["`gravity.device`", "the gravity solver", ONE_DEVICE],
    );
}
