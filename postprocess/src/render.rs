//! Font registration, in-memory rendering, PNG encoding, atomic file writes
//! and the hand-drawn legend box shared by the plots.

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// DejaVu Sans, embedded so that plotting needs no system fonts (licence in
/// `fonts/LICENSE-DejaVu.txt`).
static DEJAVU_SANS: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// The font family every text element asks for.
pub(crate) const FAMILY: &str = "sans-serif";

/// The drawing area type all plots draw on.
pub(crate) type Canvas<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Register the embedded font with plotters, once per process.
fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok =
        *REGISTERED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, DEJAVU_SANS).is_ok());
    if !ok {
        bail!("the embedded DejaVu Sans font could not be parsed");
    }
    Ok(())
}

/// Draw with `draw` on a white canvas of `size` pixels, all in memory, and
/// return the image encoded as PNG.
pub(crate) fn render_png(
    size: (u32, u32),
    draw: impl FnOnce(&Canvas<'_>) -> Result<()>,
) -> Result<Vec<u8>> {
    let rgb = render_rgb(size, draw)?;
    let mut png_bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png_bytes, size.0, size.1);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().context("PNG encoding")?;
        writer.write_image_data(&rgb).context("PNG encoding")?;
        writer.finish().context("PNG encoding")?;
    }
    Ok(png_bytes)
}

/// Draw with `draw` on a white canvas of `size` pixels, all in memory, and
/// return its RGB pixels (3 bytes a pixel, rows from the top).
pub(crate) fn render_rgb(
    size: (u32, u32),
    draw: impl FnOnce(&Canvas<'_>) -> Result<()>,
) -> Result<Vec<u8>> {
    ensure_font()?;
    let (w, h) = size;
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        draw(&root)?;
        root.present().map_err(plot_err)?;
    }
    Ok(rgb)
}

/// plotters' errors carry the backend type; keep only their message.
pub(crate) fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing failed: {e}")
}

/// Replace `path` with `bytes` so that readers only ever see the old or the
/// new complete file: write `<name>.tmp-<pid>-<n>` next to it, fsync, rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(
        "{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    // Make the rename itself durable; not possible everywhere, so best effort.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// How a legend entry's sample line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stroke {
    Solid,
    Dashed,
}

/// Dash and gap lengths in pixels for dashed lines.
pub(crate) const DASH: (u32, u32) = (9, 5);

/// One line of a legend.
pub(crate) struct LegendEntry {
    pub label: String,
    /// Colour and width of the sample line, as in the plot.
    pub style: ShapeStyle,
    pub stroke: Stroke,
}

/// Where a legend box goes, in canvas pixels.
pub(crate) enum Anchor {
    /// The box's top-right corner.
    TopRight(i32, i32),
    /// The box's top-left corner.
    TopLeft(i32, i32),
    /// The box's bottom-right corner.
    BottomRight(i32, i32),
    /// The box's bottom-left corner.
    BottomLeft(i32, i32),
}

const SWATCH: i32 = 40;

fn legend_text_style(font_px: u32) -> TextStyle<'static> {
    (FAMILY, font_px)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center))
}

const LEGEND_PAD: i32 = 10;

/// Width and height in pixels of the box [`draw_legend`] draws for the
/// same arguments; (0, 0) when there are no entries.
pub(crate) fn legend_size(
    canvas: &Canvas<'_>,
    entries: &[LegendEntry],
    note: Option<&str>,
    font_px: u32,
    line_px: i32,
) -> Result<(i32, i32)> {
    if entries.is_empty() {
        return Ok((0, 0));
    }
    let text_style = legend_text_style(font_px);
    let pad = LEGEND_PAD;
    let mut text_w = 0i32;
    for label in entries.iter().map(|e| e.label.as_str()).chain(note) {
        let (w, _) = canvas
            .estimate_text_size(label, &text_style)
            .map_err(plot_err)?;
        text_w = text_w.max(w as i32);
    }
    let rows = entries.len() as i32 + i32::from(note.is_some());
    let box_w = pad + SWATCH + 8 + text_w + pad;
    let box_h = pad + rows * line_px + pad / 2;
    Ok((box_w, box_h))
}

/// Draw a framed legend box on a half-opaque white background; `note`, when
/// given, is an extra unmarked line at the bottom. Returns nothing drawn
/// when there are no entries.
pub(crate) fn draw_legend(
    canvas: &Canvas<'_>,
    anchor: Anchor,
    entries: &[LegendEntry],
    note: Option<&str>,
    font_px: u32,
    line_px: i32,
) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let text_style = legend_text_style(font_px);
    let pad = LEGEND_PAD;
    let (box_w, box_h) = legend_size(canvas, entries, note, font_px, line_px)?;
    let (x0, y0) = match anchor {
        Anchor::TopRight(x, y) => (x - box_w, y),
        Anchor::TopLeft(x, y) => (x, y),
        Anchor::BottomRight(x, y) => (x - box_w, y - box_h),
        Anchor::BottomLeft(x, y) => (x, y - box_h),
    };
    canvas
        .draw(&Rectangle::new(
            [(x0, y0), (x0 + box_w, y0 + box_h)],
            WHITE.mix(0.88).filled(),
        ))
        .map_err(plot_err)?;
    canvas
        .draw(&Rectangle::new(
            [(x0, y0), (x0 + box_w, y0 + box_h)],
            RGBColor(150, 150, 150).stroke_width(1),
        ))
        .map_err(plot_err)?;
    for (i, entry) in entries.iter().enumerate() {
        let yc = y0 + pad + i as i32 * line_px + line_px / 2;
        let (xa, xb) = (x0 + pad, x0 + pad + SWATCH);
        let style = entry.style;
        match entry.stroke {
            Stroke::Solid => canvas
                .draw(&PathElement::new(vec![(xa, yc), (xb, yc)], style))
                .map_err(plot_err)?,
            Stroke::Dashed => {
                let mut x = xa;
                while x < xb {
                    let end = (x + DASH.0 as i32).min(xb);
                    canvas
                        .draw(&PathElement::new(vec![(x, yc), (end, yc)], style))
                        .map_err(plot_err)?;
                    x = end + DASH.1 as i32;
                }
            }
        }
        canvas
            .draw(&Text::new(
                entry.label.clone(),
                (xb + 8, yc),
                text_style.clone(),
            ))
            .map_err(plot_err)?;
    }
    if let Some(note) = note {
        let yc = y0 + pad + entries.len() as i32 * line_px + line_px / 2;
        canvas
            .draw(&Text::new(
                note.to_string(),
                (x0 + pad, yc),
                text_style.color(&RGBColor(80, 80, 80)),
            ))
            .map_err(plot_err)?;
    }
    Ok(())
}
