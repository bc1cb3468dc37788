//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The pixels of a decoded RGB PNG, after checking its size and colour type.
pub fn decode_png(path: &Path, size: (u32, u32)) -> Vec<[u8; 3]> {
    let decoder = png::Decoder::new(fs::File::open(path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), size, "{}", path.display());
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf[..info.buffer_size()]
        .chunks_exact(3)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

/// Decode a PNG and check its size and that it is a real plot: many
/// colours (anti-aliased text and coloured lines) and dark text pixels.
pub fn check_png(path: &Path, size: (u32, u32)) {
    let pixels = decode_png(path, size);
    let distinct: HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        distinct.len() > 50,
        "{}: only {} colours",
        path.display(),
        distinct.len()
    );
    let dark = pixels.iter().filter(|p| p.iter().all(|&c| c < 60)).count();
    assert!(dark > 2000, "{}: only {dark} dark pixels", path.display());
}

/// Copy `paths` into `$POSTPROCESS_DEMO_DIR`, when set, with `prefix`
/// before each file name.
pub fn demo_copy(paths: &[PathBuf], prefix: &str) {
    if let Some(dir) = std::env::var_os("POSTPROCESS_DEMO_DIR") {
        fs::create_dir_all(&dir).unwrap();
        for p in paths {
            let name = format!("{prefix}{}", p.file_name().unwrap().to_string_lossy());
            fs::copy(p, Path::new(&dir).join(name)).unwrap();
        }
    }
}

/// How many pixels of the PNG are exactly `rgb`.
pub fn count_color(path: &Path, size: (u32, u32), rgb: [u8; 3]) -> usize {
    decode_png(path, size).iter().filter(|&&p| p == rgb).count()
}

/// The names of the entries of `dir`.
pub fn dir_names(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Write `text` to `run/dir/name`, creating `run/dir`.
pub fn write_run_file(run: &Path, dir: &str, name: &str, text: &str) {
    let dir = run.join(dir);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(name), text).unwrap();
}

/// Write a solver's `energy.csv` and `spectra.csv` under `run/solver`.
pub fn write_solver(run: &Path, solver: &str, energy: &str, spectra: &str) {
    write_run_file(run, solver, "energy.csv", energy);
    write_run_file(run, solver, "spectra.csv", spectra);
}

/// Plot the run in `run` and check that it wrote exactly `files` there, in
/// that order; the paths written.
pub fn plot_expecting(run: &Path, title: &str, files: &[&str]) -> Vec<PathBuf> {
    let written = postprocess::plot_run(run, title).unwrap();
    let expected: Vec<PathBuf> = files.iter().map(|f| run.join(f)).collect();
    assert_eq!(written, expected);
    written
}

/// [`check_png`] on each of the first `sizes.len()` plots of `written`,
/// the i-th of size `sizes[i]`.
pub fn check_pngs(written: &[PathBuf], sizes: &[(u32, u32)]) {
    assert!(written.len() >= sizes.len(), "{written:?}");
    for (path, &size) in written.iter().zip(sizes) {
        check_png(path, size);
    }
}

/// Plot the run in `run` again: the same files are written (replacing the
/// earlier ones) and are still valid plots of `sizes`.
pub fn replot(run: &Path, title: &str, written: &[PathBuf], sizes: &[(u32, u32)]) {
    assert_eq!(postprocess::plot_run(run, title).unwrap(), written);
    check_pngs(written, sizes);
}

/// Check that plotting the run in `run` fails with an error (its causes
/// included) that names each of `parts`.
pub fn plot_error(run: &Path, parts: &[&str]) {
    let err = format!("{:#}", postprocess::plot_run(run, "x").unwrap_err());
    for part in parts {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
}
