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
