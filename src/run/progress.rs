//! Progress display: an indicatif bar on a terminal, plain lines (every 5 % or 30 s) otherwise.
//!
//! Neither can stop a run: the lines go through [`crate::console`], and indicatif ignores its
//! own write errors (its `set_position`, `set_message` and `finish` discard them); the bar is
//! hidden once stderr is known to be broken.

use crate::console::{Short, Stream};
use crate::run::options::ProgressStyle;
use std::time::Instant;

/// Progress display: a bar on a terminal, plain lines otherwise.
pub struct Progress {
    style: ProgressStyle,
    bar: Option<indicatif::ProgressBar>,
    t_end: f64,
    last_line: Instant,
    next_fraction: f64,
}

const BAR_TICKS: u64 = 10_000;

impl Progress {
    pub fn new(style: ProgressStyle, t_end: f64, t: f64) -> Self {
        let bar = (style == ProgressStyle::Bar).then(|| {
            let b = indicatif::ProgressBar::new(BAR_TICKS);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {percent:>3}% eta {eta} {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b.set_position((t / t_end * BAR_TICKS as f64) as u64);
            b
        });
        Self {
            style,
            bar,
            t_end,
            last_line: Instant::now(),
            next_fraction: (t / t_end * 20.0).floor() / 20.0 + 0.05,
        }
    }

    /// Reports the clock after a step. `quantity` gives a short "name=value" (e.g. the energy);
    /// it is called only when a line or the bar's message is about to be shown (at most every
    /// 0.1 s on a terminal, every 5 % or 30 s in a log), so a model whose figure costs a
    /// transfer from a device pays it rarely.
    pub fn update(
        &mut self,
        step: u64,
        t: f64,
        dt: f64,
        quantity: impl FnOnce() -> String,
        started: Instant,
        steps: u64,
    ) {
        let msg = |quantity: String| {
            let per_step = started.elapsed().as_secs_f64() / steps.max(1) as f64;
            format!(
                "step {step} t={:.4} dt={dt:.3e} {quantity} {:.1} ms/step",
                Short(t),
                per_step * 1e3
            )
        };
        match self.style {
            ProgressStyle::Bar => {
                if let Some(b) = &self.bar {
                    if Stream::Err.is_broken() && !b.is_hidden() {
                        b.set_draw_target(indicatif::ProgressDrawTarget::hidden());
                    }
                    b.set_position((t / self.t_end * BAR_TICKS as f64) as u64);
                    if self.last_line.elapsed().as_secs_f64() >= 0.1 {
                        b.set_message(msg(quantity()));
                        self.last_line = Instant::now();
                    }
                }
            }
            ProgressStyle::Lines => {
                let frac = t / self.t_end;
                if frac >= self.next_fraction - 1e-12 || self.last_line.elapsed().as_secs() >= 30 {
                    crate::say!("[{:5.1}%] {}", 100.0 * frac, msg(quantity()));
                    self.last_line = Instant::now();
                    while self.next_fraction <= frac + 1e-12 {
                        self.next_fraction += 0.05;
                    }
                }
            }
            ProgressStyle::Quiet => {}
        }
    }

    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }
}
