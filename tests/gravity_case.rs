//! Gravity case files: the gravity `kind`s, `[units]` and `[gravity]`, their defaults, their
//! errors (file, line, key and what is allowed) and the resolved case read back equal.

use vpm::config::{Case, EvaluatorKind, InitialCondition};
use vpm::gravity::cases::{BodyFileFormat, BodyInitial, GalaxyName};
use vpm::gravity::units::LengthUnit;

const PLUMMER: &str = r#"
[initial]
kind = "plummer"
n = 1024

[time]
t_end = 1.0
dt = 0.01

[gravity]
softening = 0.02
"#;

fn parse(text: &str) -> Result<Case, String> {
    Case::from_toml_str(text, "g.toml").map_err(|e| e.to_string())
}

#[test]
fn a_plummer_case_gets_its_defaults() {
    let case = parse(PLUMMER).unwrap();
    assert_eq!(
        case.initial,
        InitialCondition::Bodies(BodyInitial::Plummer { n: 1024, seed: 1 })
    );
    assert!(case.initial.is_gravity() && !case.initial.is_particle_defined());
    assert!(case.spectral.is_none() && case.vortex.is_none() && case.units.is_none());
    let g = case.gravity.as_ref().unwrap();
    assert_eq!(g.softening, 0.02);
    assert_eq!(g.evaluator, EvaluatorKind::Auto);
    assert_eq!(g.accuracy, 1e-4);
    assert_eq!(g.energy_error_limit, 1e-2);
    assert_eq!(
        g.snapshot_formats,
        vpm::gravity::cases::GravityConfig::DEFAULT_SNAPSHOT_FORMATS
    );
    assert_eq!(g.pictures_times, [0.0, 1.0]);
}

#[test]
fn every_kind_round_trips_through_the_resolved_toml() {
    let kinds = [
        "kind = \"kepler\"\neccentricity = 0.25\nmasses = [1.0, 0.001]",
        "kind = \"cold-collapse\"\nn = 500\nvirial_ratio = 0.05\nseed = 7",
        "kind = \"galaxy\"\nn = 4096\nmodel = \"andromeda\"",
        "kind = \"galaxy-collision\"\nn = 8192\npericentre = 20.0",
        "kind = \"bodies\"\nfile = \"/data/ics.tipsy\"",
    ];
    for initial in kinds {
        let text = format!(
            "[initial]\n{initial}\n[units]\nlength = \"1 kpc\"\nmass = \"2.325e5 Msun\"\n\
             [time]\nt_end = 2.0\ndt = 0.01\n[gravity]\nsoftening = 0.1\nevaluator = \"fmm\"\n\
             accuracy_check_every = 10\nsnapshot_every_time = 0.5\n\
             snapshot_formats = [\"tipsy\", \"table\"]\n"
        );
        let case = parse(&text).unwrap();
        let again = parse(&case.to_toml_string())
            .unwrap_or_else(|e| panic!("{e}\n{}", case.to_toml_string()));
        assert_eq!(case, again, "{}", case.to_toml_string());
        let u = case.units.unwrap();
        assert_eq!(
            (u.length, u.length_unit, u.mass_msun),
            (1.0, LengthUnit::Kpc, 2.325e5)
        );
    }
    let case = parse(&PLUMMER.replace(
        "kind = \"plummer\"\nn = 1024",
        "kind = \"galaxy\"\nn = 4096",
    ))
    .unwrap();
    assert_eq!(
        case.initial,
        InitialCondition::Bodies(BodyInitial::Galaxy {
            n: 4096,
            model: GalaxyName::MilkyWay,
            seed: 1
        })
    );
    let case = parse(&PLUMMER.replace(
        "kind = \"plummer\"\nn = 1024",
        "kind = \"bodies\"\nfile = \"/x/b.txt\"",
    ))
    .unwrap();
    assert_eq!(
        case.initial,
        InitialCondition::Bodies(BodyInitial::Bodies {
            file: "/x/b.txt".into(),
            format: BodyFileFormat::Table
        })
    );
}

/// Each bad input is refused naming the file, the line and the key, and what is allowed.
#[test]
fn bad_gravity_cases_name_the_key_and_what_is_allowed() {
    let cases: [(&str, &str, &[&str]); 10] = [
        (
            "[gravity]\nsoftening = 0.02",
            "[flow]\nnu = 0.1\n[gravity]\nsoftening = 0.02",
            &["g.toml", "[flow]", "gravity case has no fluid"],
        ),
        (
            "softening = 0.02",
            "softening = -1.0",
            &["g.toml:11", "gravity.softening", "≥ 0"],
        ),
        (
            "[gravity]\nsoftening = 0.02",
            "",
            &["missing section [gravity]", "softening"],
        ),
        ("dt = 0.01", "cfl = 0.5", &["fixed step", "dt"]),
        ("n = 1024", "n = 1", &["initial.n", "≥ 2"]),
        (
            "n = 1024",
            "n = 1024\nradius = 2.0",
            &["unknown key `initial.radius`", "n, seed"],
        ),
        (
            "softening = 0.02",
            "softening = 0.02\nsnapshot_formats = [\"hdf5\"]",
            &["gravity.snapshot_formats", "\"tipsy\""],
        ),
        (
            "softening = 0.02",
            "softening = 0.02\nevaluator = \"ewald\"",
            &["gravity.evaluator", "\"direct\", \"fmm\""],
        ),
        (
            "[gravity]",
            "[units]\nlength = \"3 lightyears\"\nmass = \"1 Msun\"\n[gravity]",
            &["units.length", "kpc"],
        ),
        (
            "[gravity]",
            "[units]\nlength = \"1 pc\"\nmass = \"1e5 kg\"\n[gravity]",
            &["units.mass", "Msun"],
        ),
    ];
    for (from, to, wanted) in cases {
        let text = PLUMMER.replace(from, to);
        let e = parse(&text).expect_err(&text);
        for w in wanted {
            assert!(e.contains(w), "{e:?} lacks {w:?}\n{text}");
        }
    }
}

#[test]
fn the_named_gravity_cases_parse() {
    for name in ["kepler", "plummer"] {
        let (case, _) = vpm::config::resolve_case(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(case.initial.is_gravity(), "{name}");
        let again = Case::from_toml_str(&case.to_toml_string(), name).unwrap();
        assert_eq!(case, again, "{name}");
    }
}
