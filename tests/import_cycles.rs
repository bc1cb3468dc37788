//! No import circles between the files of `src/`.
//!
//! Reads every `src/**/*.rs`, collects its `use crate::…` and `use super::…` statements
//! (grouped `use crate::{a::b, c}` forms and groups over several lines included; `super`
//! resolved from the file's module and the inline modules around the statement), maps each
//! imported path to the file that defines it (`crate::a::b::C` → `src/a/b.rs` or
//! `src/a/b/mod.rs`, else the longest module prefix that is a file; the crate root is left
//! out), and fails naming every cycle of files. An edge from a file to itself does not count,
//! and a `mod.rs` importing its own child by `use child::…` is not read (a relative path); a
//! child importing its parent `mod.rs` is an edge.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Cycles known and accepted for now, each as its files in any order (none today).
const ALLOWED_CYCLES: &[&[&str]] = &[];

/// One `use` statement's imports: the file it names for each path, and where it stands.
#[derive(Debug)]
struct Import {
    /// The file the statement is in, relative to the crate root (`src/…`).
    from: String,
    /// 1-based line of the `use` keyword.
    line: usize,
    /// The file that defines the imported path (`src/…`).
    to: String,
}

/// The source with comments, string and character literals blanked (newlines kept), so that
/// braces and keywords in them are not read.
fn strip(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
                out.push(b' ');
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest, i == 0 || !is_ident(b[i - 1])) {
            // r"…", r#"…"#, br"…": ends at a quote followed by as many hashes.
            let open = rest.iter().position(|&c| c == b'"').unwrap() + 1;
            let mut j = i + open;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            let end = (j + close.len()).min(b.len());
            b[i..end].iter().for_each(|&c| blank(&mut out, c));
            i = end;
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let step = if b[i] == b'\\' { 2 } else { 1 };
                b[i..(i + step).min(b.len())]
                    .iter()
                    .for_each(|&c| blank(&mut out, c));
                i += step;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}', 'é'), or else a lifetime or label.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(2).position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let width = source[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(width + 1) == Some(&b'\'')).then_some(width + 2)
            };
            let n = end.unwrap_or(1);
            rest[..n].iter().for_each(|&c| blank(&mut out, c));
            i += n;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The number of hashes of a raw string literal starting here (`r"`, `r#"`, `br##"`, …).
fn raw_string_start(rest: &[u8], at_token_start: bool) -> Option<usize> {
    if !at_token_start {
        return None;
    }
    let after_prefix = rest
        .strip_prefix(b"br")
        .or_else(|| rest.strip_prefix(b"r"))?;
    let hashes = after_prefix.iter().take_while(|&&c| c == b'#').count();
    (after_prefix.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// Tokens of stripped source: identifiers, `::`, and single punctuation characters, each with
/// its 1-based line.
fn tokens(stripped: &str) -> Vec<(String, usize)> {
    let b = stripped.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if is_ident(c) || c >= 0x80 {
            let start = i;
            while i < b.len() && (is_ident(b[i]) || b[i] >= 0x80) {
                i += 1;
            }
            out.push((stripped[start..i].to_string(), line));
        } else if b[i..].starts_with(b"::") {
            out.push(("::".to_string(), line));
            i += 2;
        } else {
            out.push(((c as char).to_string(), line));
            i += 1;
        }
    }
    out
}

/// Every path a use tree names, as segments (`self` in a group names the group's prefix; a
/// glob names the prefix). `as` renames are dropped.
fn use_paths(tokens: &[String]) -> Vec<Vec<String>> {
    fn tree(t: &[String], pos: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        if t.get(*pos).map(String::as_str) == Some("::") {
            *pos += 1;
        }
        loop {
            match t.get(*pos).map(String::as_str) {
                Some("{") => {
                    *pos += 1;
                    while !matches!(t.get(*pos).map(String::as_str), Some("}") | None) {
                        tree(t, pos, &path, out);
                        if t.get(*pos).map(String::as_str) == Some(",") {
                            *pos += 1;
                        }
                    }
                    *pos += 1;
                    return;
                }
                Some("*") => {
                    *pos += 1;
                    out.push(path);
                    return;
                }
                Some("self") if path.len() == prefix.len() && !prefix.is_empty() => {
                    *pos += 1;
                }
                Some(segment) if segment.bytes().all(is_ident) => {
                    path.push(segment.to_string());
                    *pos += 1;
                }
                _ => break,
            }
            if t.get(*pos).map(String::as_str) == Some("::") {
                *pos += 1;
            } else {
                break;
            }
        }
        if t.get(*pos).map(String::as_str) == Some("as") {
            *pos += 2;
        }
        out.push(path);
    }
    let mut out = Vec::new();
    tree(tokens, &mut 0, &[], &mut out);
    out
}

/// The module path of a file under `src/` (`src/a/b.rs` and `src/a/b/mod.rs` → `[a, b]`), or
/// `None` for a crate root.
fn module_of(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop()?;
    if parts.is_empty() && (file == "lib.rs" || file == "main.rs") {
        return None;
    }
    if file != "mod.rs" {
        parts.push(file.trim_end_matches(".rs").to_string());
    }
    Some(parts)
}

/// The file defining the longest prefix of a module path that is a file (`src/a/b.rs` or
/// `src/a/b/mod.rs`); `None` for the crate root.
fn file_of(modules: &BTreeMap<Vec<String>, String>, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .find_map(|k| modules.get(&path[..k]).cloned())
}

/// The imports of one file that name another file (crate root and self-edges left out).
fn imports_of(
    file: &str,
    module: &[String],
    source: &str,
    modules: &BTreeMap<Vec<String>, String>,
) -> Vec<Import> {
    let toks = tokens(&strip(source));
    let mut out = Vec::new();
    // Inline modules open around the current token: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match toks[i].0.as_str() {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "mod" if toks.get(i + 2).map(|t| t.0.as_str()) == Some("{") => {
                inline.push((toks[i + 1].0.clone(), depth + 1));
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                let end = toks[i..]
                    .iter()
                    .position(|t| t.0 == ";")
                    .map_or(toks.len(), |p| i + p);
                let statement: Vec<String> = toks[i + 1..end].iter().map(|t| t.0.clone()).collect();
                let mut here: Vec<String> = module.to_vec();
                here.extend(inline.iter().map(|(name, _)| name.clone()));
                for path in use_paths(&statement) {
                    let absolute = match path.first().map(String::as_str) {
                        Some("crate") => path[1..].to_vec(),
                        Some("super") => {
                            let ups = path.iter().take_while(|s| *s == "super").count();
                            let mut base = here[..here.len().saturating_sub(ups)].to_vec();
                            base.extend_from_slice(&path[ups..]);
                            base
                        }
                        _ => continue,
                    };
                    if let Some(to) = file_of(modules, &absolute).filter(|to| to != file) {
                        out.push(Import {
                            from: file.to_string(),
                            line: toks[i].1,
                            to,
                        });
                    }
                }
                i = end + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The crate's file graph: every import between two files of `src/`.
fn crate_imports(root: &Path) -> Vec<Import> {
    let src = root.join("src");
    let files: Vec<(String, Option<Vec<String>>, PathBuf)> = rust_files(&src)
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).unwrap().to_path_buf();
            let name = Path::new("src")
                .join(&relative)
                .to_string_lossy()
                .into_owned();
            (name, module_of(&relative), path)
        })
        .collect();
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .filter_map(|(name, module, _)| Some((module.clone()?, name.clone())))
        .collect();
    files
        .iter()
        .filter_map(|(name, module, path)| Some((name, module.as_ref()?, path)))
        .flat_map(|(name, module, path)| {
            let source = std::fs::read_to_string(path).unwrap();
            imports_of(name, module, &source, &modules)
        })
        .collect()
}

/// The cycles of a graph: for each strongly connected set of two or more files, the shortest
/// cycle through its first file, as the files in order (the first not repeated at the end).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([from.clone()]);
        while let Some(f) = queue.pop_front() {
            for next in edges.get(&f).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    queue.push_back(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|f| (f, reach(f))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for (&start, from_start) in &reachable {
        if done.contains(start) || !from_start.contains(start) {
            continue;
        }
        let component: BTreeSet<&String> = from_start
            .iter()
            .filter(|f| reachable.get(f).is_some_and(|r| r.contains(start)))
            .collect();
        done.extend(component.iter().map(|f| (*f).clone()));
        // Shortest way back to `start` inside the component, by breadth-first search.
        let mut previous: BTreeMap<&String, &String> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        'search: while let Some(f) = queue.pop_front() {
            for next in edges.get(f).into_iter().flatten() {
                if next == start {
                    let mut cycle = vec![f.clone()];
                    let mut at = f;
                    while at != start {
                        at = previous[at];
                        cycle.push(at.clone());
                    }
                    cycle.reverse();
                    out.push(cycle);
                    break 'search;
                }
                if component.contains(next) && !previous.contains_key(next) {
                    previous.insert(next, f);
                    queue.push_back(next);
                }
            }
        }
    }
    out
}

fn graph(imports: &[Import]) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for import in imports {
        edges
            .entry(import.from.clone())
            .or_default()
            .insert(import.to.clone());
    }
    edges
}

#[test]
fn no_import_cycles_between_files() {
    let imports = crate_imports(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        imports.len() > 100,
        "only {} imports found between the files of src/: is the reader broken?",
        imports.len()
    );
    let allowed = |cycle: &[String]| {
        ALLOWED_CYCLES.iter().any(|known| {
            known.len() == cycle.len() && cycle.iter().all(|f| known.contains(&f.as_str()))
        })
    };
    let found: Vec<String> = cycles(&graph(&imports))
        .into_iter()
        .filter(|cycle| !allowed(cycle))
        .map(|cycle| {
            let steps: Vec<String> = (0..cycle.len())
                .map(|k| {
                    let (from, to) = (&cycle[k], &cycle[(k + 1) % cycle.len()]);
                    let lines: Vec<String> = imports
                        .iter()
                        .filter(|i| &i.from == from && &i.to == to)
                        .map(|i| i.line.to_string())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    format!("  {from}:{} uses {to}", lines.join(","))
                })
                .collect();
            format!("{} → {}\n{}", cycle.join(" → "), cycle[0], steps.join("\n"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "{} import cycle(s) between the files of src/:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The reader on a small made-up crate: grouped and multi-line statements, `super` from an
/// inline module, a crate-root import, a child's import of its parent and a parent's relative
/// import of its child.
#[test]
fn reader_finds_grouped_multiline_and_super_imports() {
    let modules: BTreeMap<Vec<String>, String> = [
        (vec!["a"], "src/a/mod.rs"),
        (vec!["a", "b"], "src/a/b.rs"),
        (vec!["c"], "src/c.rs"),
        (vec!["d"], "src/d.rs"),
        (vec!["e"], "src/e.rs"),
    ]
    .into_iter()
    .map(|(m, f)| (m.into_iter().map(String::from).collect(), f.to_string()))
    .collect();
    let a = "use b::Thing;\n// use crate::e::Commented;\nlet s = \"use crate::e::InString;\";\n";
    let b = "use crate::{\n    c::{self, C},\n    e::E as Ee,\n    Root,\n};\nuse super::Parent;\n\
             mod tests {\n    use super::*;\n    use super::super::b::Same;\n}\n";
    let c = "pub(crate) use crate::d::{Thing,\n    Other};\nfn f<'a>(x: &'a str) -> char { '{' }\n";
    let all: Vec<Import> = [
        ("src/a/mod.rs", a, vec!["a"]),
        ("src/a/b.rs", b, vec!["a", "b"]),
    ]
    .into_iter()
    .chain([("src/c.rs", c, vec!["c"])])
    .flat_map(|(file, source, module)| {
        let module: Vec<String> = module.into_iter().map(String::from).collect();
        imports_of(file, &module, source, &modules)
    })
    .collect();
    let got: Vec<(String, usize, String)> = all
        .iter()
        .map(|i| (i.from.clone(), i.line, i.to.clone()))
        .collect();
    let want = [
        ("src/a/b.rs", 1, "src/c.rs"),
        ("src/a/b.rs", 1, "src/c.rs"),
        ("src/a/b.rs", 1, "src/e.rs"),
        ("src/a/b.rs", 6, "src/a/mod.rs"),
        ("src/c.rs", 1, "src/d.rs"),
        ("src/c.rs", 1, "src/d.rs"),
    ]
    .map(|(f, l, t)| (f.to_string(), l, t.to_string()));
    assert_eq!(got, want);
    let cyc = cycles(&graph(&all));
    assert!(cyc.is_empty(), "{cyc:?}");
    let back = Import {
        from: "src/d.rs".into(),
        line: 9,
        to: "src/a/b.rs".into(),
    };
    let looped: Vec<Import> = all.into_iter().chain([back]).collect();
    assert_eq!(
        cycles(&graph(&looped)),
        vec![vec!["src/a/b.rs", "src/c.rs", "src/d.rs"]]
    );
}
