//! Every section citation in the repository resolves to a heading of `docs/physics.md`.
//!
//! Code and documents cite the physics reference by section sign and number: a single section
//! (sign + `2`), a subsection (sign + `2.3`), a range (sign + `2–3`, en dash, hyphen or em dash)
//! and a list (double sign + `2, 4`). This test scans every `.rs`, `.cu`, `.cuh`, `.md` and
//! `.toml` file under `src/`, `kernels/`, `tests/`, `postprocess/`, `cases/` and `docs/`, plus
//! `ARCHITECTURE.md` and `README.md`, and checks each cited number against the numbers in the
//! `#` headings of `docs/physics.md`. A citation `n.m` needs a heading `n.m`; a range of whole
//! sections needs every section in it.
//!
//! No dependency on the vpm library: plain file reading from `CARGO_MANIFEST_DIR`.
//!
//! This file spells the section sign only as the escape `\u{a7}`, so that its own fabricated
//! examples are not taken for citations when the scan reads it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The section sign.
const SIGN: char = '\u{a7}';
/// Folders scanned, recursively (folders named `target` or starting with `.` are skipped).
const DIRS: [&str; 6] = ["src", "kernels", "tests", "postprocess", "cases", "docs"];
/// Files at the repository root scanned as well.
const ROOT_FILES: [&str; 2] = ["ARCHITECTURE.md", "README.md"];
/// File endings scanned.
const EXTS: [&str; 5] = ["rs", "cu", "cuh", "md", "toml"];
/// The physics reference, relative to the repository root.
const REFERENCE: &str = "docs/physics.md";

/// A section number: `[2]` for section 2, `[2, 3]` for subsection 2.3.
type Section = Vec<u32>;

fn show(s: &Section) -> String {
    let parts: Vec<String> = s.iter().map(|n| n.to_string()).collect();
    format!("{SIGN}{}", parts.join("."))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file the scan reads, sorted, as (path relative to the root, absolute path).
fn scanned_files() -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    walk(&p, out);
                }
            } else if EXTS.iter().any(|x| name.ends_with(&format!(".{x}"))) {
                out.push(p);
            }
        }
    }
    let root = root();
    let mut files = Vec::new();
    for d in DIRS {
        walk(&root.join(d), &mut files);
    }
    for f in ROOT_FILES {
        let p = root.join(f);
        if p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            (rel, p)
        })
        .collect()
}

fn read(path: &Path) -> String {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    String::from_utf8_lossy(&bytes).into_owned()
}

fn is_space(c: char) -> bool {
    c == ' ' || c == '\u{a0}' || c == '\u{202f}' || c == '\u{2009}'
}

fn skip_spaces(c: &[char], mut i: usize) -> usize {
    while i < c.len() && is_space(c[i]) {
        i += 1;
    }
    i
}

/// A number `n` or `n.m` (a dot counts only when a digit follows it, so the full stop of
/// "... section 7." is not part of the number). Returns the number and the index after it.
fn parse_number(c: &[char], i: usize) -> Option<(Section, usize)> {
    let mut parts = Vec::new();
    let mut i = i;
    loop {
        let start = i;
        while i < c.len() && c[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let s: String = c[start..i].iter().collect();
        parts.push(s.parse().ok()?);
        if i + 1 < c.len() && c[i] == '.' && c[i + 1].is_ascii_digit() {
            i += 1;
        } else {
            return Some((parts, i));
        }
    }
}

/// One citation: the line (1-based), the text as written, and every section it names.
#[derive(Debug, PartialEq)]
struct Citation {
    line: usize,
    text: String,
    sections: Vec<Section>,
}

/// The citations in a text. A sign not followed by a number is not a citation.
fn citations(text: &str) -> Vec<Citation> {
    let mut out = Vec::new();
    for (ln, line) in text.lines().enumerate() {
        let c: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < c.len() {
            if c[i] != SIGN {
                i += 1;
                continue;
            }
            let start = i;
            let mut signs = 0;
            while i < c.len() && c[i] == SIGN {
                signs += 1;
                i += 1;
            }
            let Some((first, mut end)) = parse_number(&c, skip_spaces(&c, i)) else {
                continue;
            };
            let mut sections = vec![first];
            loop {
                let j = skip_spaces(&c, end);
                // Range: n–m (en dash, hyphen, em dash), the second number with or without a sign.
                if j < c.len() && matches!(c[j], '\u{2013}' | '-' | '\u{2014}') {
                    let mut k = skip_spaces(&c, j + 1);
                    while k < c.len() && c[k] == SIGN {
                        k += 1;
                    }
                    if let Some((to, e)) = parse_number(&c, skip_spaces(&c, k)) {
                        let from = sections.last().unwrap().clone();
                        if from.len() == 1
                            && to.len() == 1
                            && from[0] < to[0]
                            && to[0] - from[0] <= 100
                        {
                            for n in from[0] + 1..to[0] {
                                sections.push(vec![n]);
                            }
                        }
                        sections.push(to);
                        end = e;
                        continue;
                    }
                }
                // List after a double sign: "2, 4" or "2 and 4".
                if signs >= 2 {
                    let k = if j < c.len() && c[j] == ',' {
                        Some(j + 1)
                    } else if c[j..].iter().take(4).collect::<String>() == "and " {
                        Some(j + 3)
                    } else {
                        None
                    };
                    if let Some(k) = k {
                        if let Some((n, e)) = parse_number(&c, skip_spaces(&c, k)) {
                            sections.push(n);
                            end = e;
                            continue;
                        }
                    }
                }
                break;
            }
            out.push(Citation {
                line: ln + 1,
                text: c[start..end].iter().collect(),
                sections,
            });
            i = end;
        }
    }
    out
}

/// The section numbers of a reference's `#` headings: the number after a section sign, or a
/// leading "n." / "n.m" number ("## 1. Setting").
fn headings(reference: &str) -> BTreeSet<Section> {
    let mut out = BTreeSet::new();
    for line in reference.lines() {
        let t = line.trim_start();
        if !t.starts_with('#') {
            continue;
        }
        let body: Vec<char> = t.trim_start_matches('#').trim_start().chars().collect();
        if let Some(p) = body.iter().position(|&ch| ch == SIGN) {
            if let Some((n, _)) = parse_number(&body, skip_spaces(&body, p + 1)) {
                out.insert(n);
            }
        } else if let Some((n, _)) = parse_number(&body, 0) {
            out.insert(n);
        }
    }
    out
}

/// "file:line: `text`: no heading for X, Y" for every citation that does not resolve.
fn unresolved(file: &str, text: &str, known: &BTreeSet<Section>) -> Vec<String> {
    citations(text)
        .into_iter()
        .filter_map(|c| {
            let missing: Vec<String> = c
                .sections
                .iter()
                .filter(|s| !known.contains(*s))
                .map(show)
                .collect();
            (!missing.is_empty()).then(|| {
                format!(
                    "{file}:{}: `{}`: no heading for {}",
                    c.line,
                    c.text,
                    missing.join(", ")
                )
            })
        })
        .collect()
}

/// The name of the old physics reference, which lived outside the repository (built here so
/// that this file does not contain it).
fn external_path() -> String {
    ["PHYSICS", ".md"].concat()
}

/// "file:line: text" for every line that names the old, external physics file.
fn external_mentions(file: &str, text: &str) -> Vec<String> {
    let needle = external_path();
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&needle))
        .map(|(i, l)| format!("{file}:{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn every_section_citation_resolves_to_a_heading() {
    let reference = read(&root().join(REFERENCE));
    let known = headings(&reference);
    let files = scanned_files();
    assert!(
        files.iter().any(|(f, _)| f == "src/kernel.rs"),
        "the scan did not find src/kernel.rs: wrong root?"
    );
    let mut total = 0;
    let mut bad = Vec::new();
    for (rel, path) in &files {
        let text = read(path);
        total += citations(&text).len();
        bad.extend(unresolved(rel, &text, &known));
    }
    assert!(
        total > 0,
        "no section citations found at all: the scan is broken"
    );
    assert!(
        bad.is_empty(),
        "{} section citation(s) do not resolve to a heading of {REFERENCE}:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // The nine sections of the reference keep their numbers.
    for n in 1..=9 {
        assert!(
            known.contains(&vec![n]),
            "{REFERENCE} has no heading for {}",
            show(&vec![n])
        );
    }
}

/// The checker itself can fail: a fabricated reference and a fabricated source that cites
/// sections it does not have.
#[test]
fn fabricated_citations_of_missing_sections_are_reported() {
    let s = SIGN;
    let reference = format!(
        "# Title\n\n## {s}1 One\ntext citing {s}9 in the body is not a heading\n## {s}2 Two\n\
         ### {s}2.1 Two-one\n## 3. Three\n"
    );
    let known = headings(&reference);
    let want: BTreeSet<Section> = [vec![1], vec![2], vec![2, 1], vec![3]]
        .into_iter()
        .collect();
    assert_eq!(known, want);

    let source = format!(
        "// fine: {s}1, {s}2.1 and {s}3.\n\
         // missing: PHYSICS.md {s}4 and {s}2.2\n\
         // ranges: {s}1\u{2013}3 fine, {s}2\u{2013}5 not, {s}1-{s}2 fine\n\
         // list: {s}{s}2, 6 and {s}{s}1 and 3\n\
         // a lone {s} sign, and {s} 3 with a space\n"
    );
    let cites = citations(&source);
    let sections: Vec<Vec<Section>> = cites.iter().map(|c| c.sections.clone()).collect();
    assert_eq!(
        sections,
        vec![
            vec![vec![1]],
            vec![vec![2, 1]],
            vec![vec![3]],
            vec![vec![4]],
            vec![vec![2, 2]],
            vec![vec![1], vec![2], vec![3]],
            vec![vec![2], vec![3], vec![4], vec![5]],
            vec![vec![1], vec![2]],
            vec![vec![2], vec![6]],
            vec![vec![1], vec![3]],
            vec![vec![3]],
        ]
    );
    let bad = unresolved("fake.rs", &source, &known);
    assert_eq!(
        bad,
        vec![
            format!("fake.rs:2: `{s}4`: no heading for {s}4"),
            format!("fake.rs:2: `{s}2.2`: no heading for {s}2.2"),
            format!("fake.rs:3: `{s}2\u{2013}5`: no heading for {s}4, {s}5"),
            format!("fake.rs:4: `{s}{s}2, 6`: no heading for {s}6"),
        ]
    );
}

#[test]
fn fabricated_external_path_is_reported() {
    let text = format!(
        "//! See docs/physics.md {SIGN}2 (fine).\n//! See `../shared/{}` (stale).\n",
        external_path()
    );
    let bad = external_mentions("lib.rs", &text);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].starts_with("lib.rs:2: "), "{bad:?}");
}

/// No file names the old physics reference, which lived outside the repository: code cites
/// `docs/physics.md` (this file is skipped: it names the old file to look for it).
#[test]
fn no_file_names_the_external_physics_path() {
    let mut bad = Vec::new();
    for (rel, path) in scanned_files() {
        if rel != "tests/physics_refs.rs" {
            bad.extend(external_mentions(&rel, &read(&path)));
        }
    }
    assert!(
        bad.is_empty(),
        "{} line(s) name the physics reference outside the repository; cite {REFERENCE}:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
