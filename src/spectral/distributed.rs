//! The spectral solver across the ranks of a group of GPUs ([`crate::device::GpuGroup`]):
//! rank 0 drives, the other ranks serve.
//!
//! Every [`SlabRank`] method is collective, so every rank must call the same methods in the
//! same order. Rank 0 (the `vpm run` process) holds [`DistributedSpectralSolver`], the
//! [`SpectralStepper`] the run core steps: each of its calls sends one [`Command`] to ranks
//! 1..P (a JSON line on each child's stdin, through the group's supervisor), makes the same
//! [`SlabRank`] call itself, then reads one [`RankReply`] per rank (its memory in use, or why it
//! failed). Ranks 1..P (`vpm rank` processes, [`rank_main`]) run [`serve`]: read a command, make
//! the call on their `SlabRank`, reply. Data never travels on the pipes: the modes, the
//! transposes and the reductions go through NCCL inside the `SlabRank` calls; a command carries
//! only its scalars, and a float travels as its bits, so every rank steps with the same `dt`.
//!
//! Projection: an initial field is made real and solenoidal on rank 0's host
//! ([`super::solver::make_real_solenoidal`]) before it is scattered; a checkpoint's modes are
//! scattered as they are. Checkpoints hold the global modes (gathered on rank 0), so a run
//! resumes on any number of GPUs that splits its grid.
//!
//! Failure: a rank whose call fails (other than the non-finite state, which every rank sees
//! alike and survives) replies with the reason and exits; the watchdog of rank 0 sees it, raises
//! the group's signal and kills the other ranks, and rank 0's call returns
//! [`SpectralError::Ranks`] saying which rank failed and how ("rank 1 (cuda:1, pid …) exited
//! with signal: 9 (SIGKILL)").

use super::gpu_slab::{SlabRank, SlabSums};
use super::slab::SlabLayout;
use super::solver::{make_real_solenoidal, Dealias, SpectralGrid, VectorModes};
use super::stepper::{SpectralError, SpectralStepper};
use crate::device::group::{used_bytes, JoinMessage, RankReply};
use crate::device::nccl::AbortSignal;
use crate::device::{Device, GpuGroup};
use crate::diagnostics::FlowStats;
use crate::output::RankRecord;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

/// What to do after a rank failed (the run's `failed:` status ends with it).
pub const RANK_FAILED_ADVICE: &str = "A rank of the group of GPUs failed (its log is above; a \
     killed rank, a lost GPU or NCCL); every rank was stopped. `vpm resume` continues from the \
     last checkpoint, on any number of GPUs that splits the grid.";

/// One collective call, as rank 0 sends it to the other ranks (a JSON line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// Make the rank's solver ([`SlabRank::new`]) with zero velocity.
    Init {
        n: usize,
        /// `"2/3"` or `"3/2"`.
        dealias: String,
        #[serde(with = "f64_bits")]
        nu: f64,
    },
    /// [`SlabRank::scatter_modes`] (rank 0 gives the field).
    ScatterModes,
    /// [`SlabRank::gather_modes`] (rank 0 receives the field).
    GatherModes,
    SpeedSumMax,
    Step {
        #[serde(with = "f64_bits")]
        dt: f64,
    },
    Sums,
    MaxDivergence,
    MaxVorticity,
    VelocityOnGrid,
    TimeTranspose {
        fields: usize,
        repeats: usize,
    },
    TimeSteps {
        #[serde(with = "f64_bits")]
        dt: f64,
        repeats: usize,
    },
    /// [`SlabRank::set_exchange_chunk`].
    ExchangeChunk {
        fields: usize,
    },
    /// Leave the loop (exit 0).
    Shutdown,
}

/// A float as its 64 bits (JSON's decimal form need not round-trip every bit).
mod f64_bits {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(x.to_bits())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        u64::deserialize(d).map(f64::from_bits)
    }
}

impl Command {
    /// The command that makes a rank's solver for `grid` and `nu`.
    pub fn init(grid: SpectralGrid, nu: f64) -> Command {
        Command::Init {
            n: grid.n,
            dealias: grid.dealias.as_str().to_string(),
            nu,
        }
    }

    /// The grid and viscosity of an [`Command::Init`].
    pub fn grid(&self) -> Option<(SpectralGrid, f64)> {
        match self {
            Command::Init { n, dealias, nu } => {
                let rule = match dealias.as_str() {
                    "2/3" => Dealias::TwoThirds,
                    "3/2" => Dealias::ThreeHalves,
                    _ => return None,
                };
                Some((SpectralGrid::new(*n, rule), *nu))
            }
            _ => None,
        }
    }

    /// A serving rank's part of the command (its results are rank 0's, or equal on every rank).
    pub fn run_on<S: SlabOps>(&self, s: &mut S) -> Result<(), SpectralError> {
        match self {
            Command::ScatterModes => s.scatter_modes(None),
            Command::GatherModes => s.gather_modes().map(drop),
            Command::SpeedSumMax => s.speed_sum_max().map(drop),
            Command::Step { dt } => s.step(*dt),
            Command::Sums => s.sums().map(drop),
            Command::MaxDivergence => s.max_divergence().map(drop),
            Command::MaxVorticity => s.max_vorticity().map(drop),
            Command::VelocityOnGrid => s.velocity_on_grid().map(drop),
            Command::TimeTranspose { fields, repeats } => {
                s.time_transpose(*fields, *repeats).map(drop)
            }
            Command::TimeSteps { dt, repeats } => s.time_steps(*dt, *repeats).map(drop),
            Command::ExchangeChunk { fields } => {
                s.set_exchange_chunk(*fields);
                Ok(())
            }
            Command::Init { .. } | Command::Shutdown => Ok(()),
        }
    }

    /// The JSON line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a command serialises")
    }
}

/// The collective calls of one rank's part of the solver: [`SlabRank`]'s, as a trait so that
/// the serving loop can be tested without GPUs.
pub trait SlabOps {
    fn scatter_modes(&mut self, global: Option<&VectorModes>) -> Result<(), SpectralError>;
    fn gather_modes(&mut self) -> Result<Option<VectorModes>, SpectralError>;
    fn speed_sum_max(&mut self) -> Result<f64, SpectralError>;
    fn step(&mut self, dt: f64) -> Result<(), SpectralError>;
    fn sums(&mut self) -> Result<SlabSums, SpectralError>;
    fn max_divergence(&mut self) -> Result<f64, SpectralError>;
    fn max_vorticity(&mut self) -> Result<f64, SpectralError>;
    fn velocity_on_grid(&mut self) -> Result<Option<[Vec<f64>; 3]>, SpectralError>;
    fn time_transpose(
        &mut self,
        fields: usize,
        repeats: usize,
    ) -> Result<(f64, u64), SpectralError>;
    fn time_steps(&mut self, dt: f64, repeats: usize) -> Result<Vec<f64>, SpectralError>;
    fn set_exchange_chunk(&mut self, fields: usize);
}

impl SlabOps for SlabRank {
    fn scatter_modes(&mut self, global: Option<&VectorModes>) -> Result<(), SpectralError> {
        SlabRank::scatter_modes(self, global)
    }
    fn gather_modes(&mut self) -> Result<Option<VectorModes>, SpectralError> {
        SlabRank::gather_modes(self)
    }
    fn speed_sum_max(&mut self) -> Result<f64, SpectralError> {
        SlabRank::speed_sum_max(self)
    }
    fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        SlabRank::step(self, dt)
    }
    fn sums(&mut self) -> Result<SlabSums, SpectralError> {
        SlabRank::sums(self)
    }
    fn max_divergence(&mut self) -> Result<f64, SpectralError> {
        SlabRank::max_divergence(self)
    }
    fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
        SlabRank::max_vorticity(self)
    }
    fn velocity_on_grid(&mut self) -> Result<Option<[Vec<f64>; 3]>, SpectralError> {
        SlabRank::velocity_on_grid(self)
    }
    fn time_transpose(
        &mut self,
        fields: usize,
        repeats: usize,
    ) -> Result<(f64, u64), SpectralError> {
        SlabRank::time_transpose(self, fields, repeats)
    }
    fn time_steps(&mut self, dt: f64, repeats: usize) -> Result<Vec<f64>, SpectralError> {
        SlabRank::time_steps(self, dt, repeats)
    }
    fn set_exchange_chunk(&mut self, fields: usize) {
        SlabRank::set_exchange_chunk(self, fields)
    }
}

/// Whether `grid` can be split over `ranks`: the product grid M (the transposes of the step)
/// and the solution grid N (the diagnostics on the N³ nodes) must both be multiples of the
/// ranks, and every rank must hold a k_z value. `Err` says which and what to choose.
pub fn check_split(grid: SpectralGrid, ranks: usize) -> Result<(), String> {
    SlabLayout::for_grid(grid, ranks)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Rank 0's spectral stepper across the group (module docs).
pub struct DistributedSpectralSolver {
    /// This rank's part (dropped before the group, whose last handle shuts the ranks down).
    slab: SlabRank,
    group: Arc<GpuGroup>,
    grid: SpectralGrid,
    nu: f64,
    /// The gathered state, until the next step.
    host: Option<VectorModes>,
    /// The sums of the current state, until the next step.
    sums: Option<SlabSums>,
}

impl DistributedSpectralSolver {
    /// Device memory each rank needs for `grid` over `ranks` GPUs (the largest rank's).
    pub fn device_bytes(grid: SpectralGrid, ranks: usize) -> u64 {
        SlabRank::device_bytes(grid, ranks)
    }

    /// The solver on every rank of `group` (rank 0), with zero velocity. `Err` when the grid
    /// cannot be split over the ranks ([`check_split`]) or a rank fails.
    pub fn new(
        group: Arc<GpuGroup>,
        grid: SpectralGrid,
        nu: f64,
    ) -> Result<DistributedSpectralSolver, SpectralError> {
        check_split(grid, group.ranks()).map_err(SpectralError::Ranks)?;
        if let Some(r) = group.failure() {
            return Err(SpectralError::Ranks(r));
        }
        group
            .send(&Command::init(grid, nu).to_line())
            .map_err(SpectralError::Ranks)?;
        let slab = SlabRank::new(group.comm().clone(), grid, nu);
        let slab = after_call(&group, slab)?;
        Ok(DistributedSpectralSolver {
            group,
            slab,
            grid,
            nu,
            host: None,
            sums: None,
        })
    }

    /// One collective call: `command` to ranks 1..P, `own` here, then their replies.
    fn collective<T>(
        &mut self,
        command: Command,
        own: impl FnOnce(&mut SlabRank) -> Result<T, SpectralError>,
    ) -> Result<T, SpectralError> {
        if let Some(r) = self.group.failure() {
            return Err(SpectralError::Ranks(r));
        }
        self.group
            .send(&command.to_line())
            .map_err(SpectralError::Ranks)?;
        let mine = own(&mut self.slab);
        after_call(&self.group, mine)
    }

    /// Milliseconds of each of `repeats` RK4 steps after one warm-up (CUDA events on rank 0's
    /// stream, after a barrier); the state advances.
    pub fn time_steps(&mut self, dt: f64, repeats: usize) -> Result<Vec<f64>, SpectralError> {
        self.forget();
        self.collective(Command::TimeSteps { dt, repeats }, |s| {
            s.time_steps(dt, repeats)
        })
    }

    /// Every rank transposes `fields` fields at a time beside its transforms, or with 0 all
    /// of a pass between them ([`SlabRank::set_exchange_chunk`]); the results are the same to
    /// the bit.
    pub fn set_exchange_chunk(&mut self, fields: usize) -> Result<(), SpectralError> {
        self.collective(Command::ExchangeChunk { fields }, |s| {
            s.set_exchange_chunk(fields);
            Ok(())
        })
    }

    /// Median ms of one all-to-all transpose of `fields` fields over `repeats`, and the bytes
    /// each rank sends to the others in one.
    pub fn time_transpose(
        &mut self,
        fields: usize,
        repeats: usize,
    ) -> Result<(f64, u64), SpectralError> {
        self.collective(Command::TimeTranspose { fields, repeats }, |s| {
            s.time_transpose(fields, repeats)
        })
    }

    /// Every rank's GPU ordinal, in rank order.
    pub fn ordinals(&self) -> Vec<usize> {
        self.group.ordinals().to_vec()
    }

    /// Every rank's GPU, process and peak device memory seen after its calls so far.
    pub fn rank_records(&self) -> Vec<RankRecord> {
        self.group.rank_records()
    }

    /// The group.
    pub fn group(&self) -> &Arc<GpuGroup> {
        &self.group
    }

    /// The state changed: the host copy and the sums are stale.
    fn forget(&mut self) {
        self.host = None;
        self.sums = None;
    }

    fn scatter(&mut self, uhat: VectorModes) -> Result<(), SpectralError> {
        self.forget();
        self.collective(Command::ScatterModes, |s| s.scatter_modes(Some(&uhat)))?;
        self.host = Some(uhat);
        Ok(())
    }

    fn state_sums(&mut self) -> Result<SlabSums, SpectralError> {
        if self.sums.is_none() {
            self.sums = Some(self.collective(Command::Sums, SlabRank::sums)?);
        }
        Ok(self.sums.clone().expect("just computed"))
    }
}

/// What rank 0 makes of its own call's result `mine` once the other ranks have made theirs:
/// their replies, or the group's failure (module docs).
fn after_call<T>(group: &GpuGroup, mine: Result<T, SpectralError>) -> Result<T, SpectralError> {
    match mine {
        Ok(v) => match group.receive() {
            Ok(false) => Ok(v),
            Ok(true) => {
                let why = "rank 0 and another rank disagree on a non-finite state".to_string();
                group.fail(why.clone());
                Err(SpectralError::Ranks(why))
            }
            Err(r) => Err(SpectralError::Ranks(r)),
        },
        Err(SpectralError::NonFinite(nf)) => match group.receive() {
            Ok(_) => Err(SpectralError::NonFinite(nf)),
            Err(r) => Err(SpectralError::Ranks(r)),
        },
        Err(e) => {
            // A rank that died first is the cause; otherwise rank 0's own failure is.
            let why = group.failure().unwrap_or_else(|| {
                format!(
                    "rank 0 (cuda:{}) failed: {e}",
                    group.ordinals().first().copied().unwrap_or(0)
                )
            });
            group.fail(why.clone());
            Err(SpectralError::Ranks(why))
        }
    }
}

impl SpectralStepper for DistributedSpectralSolver {
    fn grid(&self) -> SpectralGrid {
        self.grid
    }
    fn nu(&self) -> f64 {
        self.nu
    }
    fn set_velocity_modes(&mut self, mut uhat: VectorModes) -> Result<(), SpectralError> {
        make_real_solenoidal(&self.grid.layout(), &mut uhat);
        self.scatter(uhat)
    }
    fn restore_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError> {
        self.scatter(uhat)
    }
    fn velocity_modes(&mut self) -> Result<&VectorModes, SpectralError> {
        if self.host.is_none() {
            let gathered = self.collective(Command::GatherModes, SlabRank::gather_modes)?;
            let modes = gathered.ok_or_else(|| {
                SpectralError::Ranks("rank 0 received no modes from the gather".into())
            })?;
            self.host = Some(modes);
        }
        Ok(self.host.as_ref().expect("just gathered"))
    }
    fn cfl_dt(&mut self, cfl: f64) -> Result<f64, SpectralError> {
        let s = self.collective(Command::SpeedSumMax, SlabRank::speed_sum_max)?;
        Ok(self.grid.cfl_dt(cfl, s))
    }
    fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        let stepped = self.collective(Command::Step { dt }, |s| s.step(dt));
        if !matches!(stepped, Err(SpectralError::NonFinite(_))) {
            // A non-finite step is committed on no rank: the state is unchanged.
            self.forget();
        }
        stepped
    }
    fn dkdt_from_rhs(&mut self) -> Result<f64, SpectralError> {
        Ok(self.state_sums()?.sums[3])
    }
    fn flow_stats(&mut self) -> Result<FlowStats, SpectralError> {
        let s = self.state_sums()?.sums;
        Ok(FlowStats::from_mode_sums(s[0], s[1], s[2], self.nu))
    }
    fn shell_spectrum(&mut self) -> Result<Vec<f64>, SpectralError> {
        Ok(self.state_sums()?.spectrum)
    }
    fn max_divergence(&mut self) -> Result<f64, SpectralError> {
        self.collective(Command::MaxDivergence, SlabRank::max_divergence)
    }
    fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
        self.collective(Command::MaxVorticity, SlabRank::max_vorticity)
    }
    fn velocity_on_grid(&mut self) -> Result<[Vec<f64>; 3], SpectralError> {
        self.collective(Command::VelocityOnGrid, SlabRank::velocity_on_grid)?
            .ok_or_else(|| SpectralError::Ranks("rank 0 received no velocity field".into()))
    }
    fn device(&self) -> Device {
        Device::Group(self.group.clone())
    }
}

/// A serving rank's loop (module docs): reads commands from `commands` (`None`: the pipe from
/// rank 0 closed), makes the solver with `make` on [`Command::Init`], runs every other command
/// on it and writes one [`RankReply`] line to `out` per command, with `used()` as its memory.
/// Returns `Ok` on [`Command::Shutdown`]; `Err` (after replying with it) when a command fails
/// other than by the non-finite state, or when rank 0 is gone.
pub fn serve<S: SlabOps>(
    rank: usize,
    commands: &Receiver<Option<String>>,
    out: &mut impl Write,
    mut make: impl FnMut(SpectralGrid, f64) -> Result<S, SpectralError>,
    used: impl Fn() -> Option<u64>,
) -> Result<(), String> {
    let mut solver: Option<S> = None;
    loop {
        let line = match commands.recv() {
            Ok(Some(line)) => line,
            Ok(None) | Err(_) => {
                return Err(format!("rank {rank}: rank 0 is gone (its pipe closed)"))
            }
        };
        let command: Command = match serde_json::from_str(&line) {
            Ok(c) => c,
            Err(e) => {
                let why = format!("rank {rank}: `{line}` is not a command: {e}");
                reply(out, rank, Some(why.clone()), false, None);
                return Err(why);
            }
        };
        let done = match (&command, solver.as_mut()) {
            (Command::Shutdown, _) => return Ok(()),
            (Command::Init { .. }, _) => match command.grid() {
                Some((grid, nu)) => {
                    // The previous solver's memory is given back before the new one takes its
                    // own (a benchmark makes one solver per size).
                    solver = None;
                    make(grid, nu).map(|s| solver = Some(s))
                }
                None => Err(SpectralError::Ranks(format!("bad init command `{line}`"))),
            },
            (_, Some(s)) => command.run_on(s),
            (_, None) => Err(SpectralError::Ranks(format!(
                "`{line}` before the solver was made"
            ))),
        };
        match done {
            Ok(()) => reply(out, rank, None, false, used()),
            Err(SpectralError::NonFinite(e)) => reply(out, rank, Some(e.to_string()), true, used()),
            Err(e) => {
                let why = e.to_string();
                reply(out, rank, Some(why.clone()), false, used());
                return Err(format!("rank {rank}: {why}"));
            }
        }
    }
}

/// Writes one reply line (a closed pipe is rank 0 gone; the next read sees it).
fn reply(
    out: &mut impl Write,
    rank: usize,
    error: Option<String>,
    non_finite: bool,
    used: Option<u64>,
) {
    let r = RankReply {
        rank,
        error,
        non_finite,
        used_device_bytes: used,
        ..RankReply::default()
    };
    let line = serde_json::to_string(&r).expect("a reply serialises");
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The lines of `input` on a channel, then `None` at its end (or a read error), when `abort` is
/// also raised: rank 0 is gone.
pub fn lines_until_closed(
    input: impl BufRead + Send + 'static,
    abort: AbortSignal,
) -> Receiver<Option<String>> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in input.lines() {
            match line {
                Ok(l) => {
                    if tx.send(Some(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        abort.raise("rank 0 is gone (the command pipe closed)");
        let _ = tx.send(None);
    });
    rx
}

/// `vpm rank`: one serving rank of a group (module docs of [`crate::device::group`]): reads its
/// [`JoinMessage`] from stdin, joins the group, answers with its GPU and memory, then serves
/// commands until shutdown. `Err` (the process exits non-zero) when it cannot join, a command
/// fails or rank 0 is gone.
pub fn rank_main() -> Result<(), String> {
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    let mut first = String::new();
    match stdin.read_line(&mut first) {
        Ok(0) | Err(_) => {
            return Err(
                "`vpm rank` is started by `vpm run` with several GPUs; it got no join message \
                 on its stdin"
                    .into(),
            )
        }
        Ok(_) => {}
    }
    let hello: JoinMessage = serde_json::from_str(first.trim()).map_err(|e| {
        format!(
            "`vpm rank`: the join message `{}` is not valid: {e}",
            first.trim()
        )
    })?;
    let rank = hello.rank;
    let abort = AbortSignal::new();
    let commands = lines_until_closed(stdin, abort.clone());
    let mut out = std::io::stdout();
    let group = match GpuGroup::join(&hello, abort) {
        Ok(g) => g,
        Err(e) => {
            reply(&mut out, rank, Some(e.clone()), false, None);
            return Err(e);
        }
    };
    let joined = RankReply {
        gpu: Some(group.gpu().info().to_string()),
        free_device_bytes: group.gpu().free_memory().ok().map(|b| b as u64),
        ..RankReply::on(rank, group.gpu())
    };
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string(&joined).expect("serialises")
    )
    .and_then(|()| out.flush());
    let comm = group.comm().clone();
    serve(
        rank,
        &commands,
        &mut out,
        |grid, nu| SlabRank::new(comm.clone(), grid, nu),
        || used_bytes(group.gpu()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank's solver without a GPU: records the calls, fails where told.
    #[derive(Default)]
    struct Fake {
        calls: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
        non_finite_step: bool,
        broken: bool,
    }

    impl Fake {
        fn call(&mut self, what: String) -> Result<(), SpectralError> {
            self.calls.borrow_mut().push(what);
            if self.broken {
                return Err(SpectralError::Ranks("the GPU fell off".into()));
            }
            Ok(())
        }
    }

    impl SlabOps for Fake {
        fn scatter_modes(&mut self, g: Option<&VectorModes>) -> Result<(), SpectralError> {
            self.call(format!("scatter {}", g.is_some()))
        }
        fn gather_modes(&mut self) -> Result<Option<VectorModes>, SpectralError> {
            self.call("gather".into()).map(|()| None)
        }
        fn speed_sum_max(&mut self) -> Result<f64, SpectralError> {
            self.call("speed".into()).map(|()| 1.0)
        }
        fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
            self.call(format!("step {:x}", dt.to_bits()))?;
            if self.non_finite_step {
                return Err(super::super::solver::NonFiniteState.into());
            }
            Ok(())
        }
        fn sums(&mut self) -> Result<SlabSums, SpectralError> {
            self.call("sums".into()).map(|()| SlabSums {
                sums: [0.0; 4],
                spectrum: vec![],
            })
        }
        fn max_divergence(&mut self) -> Result<f64, SpectralError> {
            self.call("div".into()).map(|()| 0.0)
        }
        fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
            self.call("vort".into()).map(|()| 0.0)
        }
        fn velocity_on_grid(&mut self) -> Result<Option<[Vec<f64>; 3]>, SpectralError> {
            self.call("velocity".into()).map(|()| None)
        }
        fn time_transpose(&mut self, f: usize, r: usize) -> Result<(f64, u64), SpectralError> {
            self.call(format!("transpose {f} {r}")).map(|()| (0.0, 0))
        }
        fn time_steps(&mut self, dt: f64, r: usize) -> Result<Vec<f64>, SpectralError> {
            self.call(format!("steps {:x} {r}", dt.to_bits()))
                .map(|()| vec![])
        }
        fn set_exchange_chunk(&mut self, fields: usize) {
            let _ = self.call(format!("chunk {fields}"));
        }
    }

    fn every_command() -> Vec<Command> {
        vec![
            Command::init(SpectralGrid::new(24, Dealias::ThreeHalves), 1.0 / 1600.0),
            Command::ScatterModes,
            Command::GatherModes,
            Command::SpeedSumMax,
            Command::Step { dt: 0.1 + 0.2 },
            Command::Sums,
            Command::MaxDivergence,
            Command::MaxVorticity,
            Command::VelocityOnGrid,
            Command::TimeTranspose {
                fields: 6,
                repeats: 5,
            },
            Command::TimeSteps {
                dt: std::f64::consts::PI * 1e-300,
                repeats: 3,
            },
            Command::ExchangeChunk { fields: 2 },
            Command::Shutdown,
        ]
    }

    /// Every command survives its JSON line bit for bit (floats as bits), one line each.
    #[test]
    fn commands_round_trip_through_their_lines() {
        for c in every_command() {
            let line = c.to_line();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(serde_json::from_str::<Command>(&line).unwrap(), c, "{line}");
        }
        let (grid, nu) = every_command()[0].grid().unwrap();
        assert_eq!(grid, SpectralGrid::new(24, Dealias::ThreeHalves));
        assert_eq!(nu.to_bits(), (1.0f64 / 1600.0).to_bits());
        assert_eq!(
            Command::init(SpectralGrid::new(16, Dealias::TwoThirds), 0.5)
                .grid()
                .unwrap()
                .0
                .dealias,
            Dealias::TwoThirds
        );
        assert_eq!(
            Command::Shutdown.to_line(),
            r#"{"command":"shutdown"}"#,
            "the group's Drop sends this line"
        );
    }

    fn feed(lines: &[String], close: bool) -> Receiver<Option<String>> {
        let (tx, rx) = channel();
        for l in lines {
            tx.send(Some(l.clone())).unwrap();
        }
        if close {
            tx.send(None).unwrap();
        }
        rx
    }

    fn replies(out: &[u8]) -> Vec<RankReply> {
        String::from_utf8(out.to_vec())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The loop makes the solver on init, runs every command on it in order with the
    /// same bits rank 0 sent, replies once per command with its memory, and stops on shutdown.
    #[test]
    fn the_serving_loop_runs_every_command_and_replies_once_each() {
        let lines: Vec<String> = every_command().iter().map(Command::to_line).collect();
        let rx = feed(&lines, false);
        let mut out = Vec::new();
        let mut made = None;
        let calls = std::rc::Rc::default();
        let r = serve(
            2,
            &rx,
            &mut out,
            |grid, nu| {
                made = Some((grid, nu));
                Ok(Fake {
                    calls: std::rc::Rc::clone(&calls),
                    ..Fake::default()
                })
            },
            || Some(42),
        );
        assert_eq!(r, Ok(()));
        let (grid, nu) = made.unwrap();
        assert_eq!(grid, SpectralGrid::new(24, Dealias::ThreeHalves));
        assert_eq!(nu.to_bits(), (1.0f64 / 1600.0).to_bits());
        let rs = replies(&out);
        // Every command but shutdown is answered.
        assert_eq!(rs.len(), every_command().len() - 1);
        assert!(rs
            .iter()
            .all(|r| r.rank == 2 && r.error.is_none() && r.used_device_bytes == Some(42)));
        assert_eq!(
            *calls.borrow(),
            vec![
                "scatter false".to_string(),
                "gather".into(),
                "speed".into(),
                format!("step {:x}", (0.1f64 + 0.2).to_bits()),
                "sums".into(),
                "div".into(),
                "vort".into(),
                "velocity".into(),
                "transpose 6 5".into(),
                format!("steps {:x} 3", (std::f64::consts::PI * 1e-300).to_bits()),
                "chunk 2".into(),
            ]
        );
    }

    /// [`serve`] as rank `rank` over `lines` (then the pipe's end when `close`), with fakes
    /// made by `fake`: its result and replies.
    fn serve_fakes(
        rank: usize,
        lines: &[String],
        close: bool,
        fake: fn() -> Fake,
    ) -> (Result<(), String>, Vec<RankReply>) {
        let mut out = Vec::new();
        let r = serve(
            rank,
            &feed(lines, close),
            &mut out,
            |_, _| Ok(fake()),
            || None,
        );
        (r, replies(&out))
    }

    /// A non-finite step is answered and served on; another failure is answered and ends the
    /// loop with the rank named; a closed pipe (rank 0 gone) ends it too.
    #[test]
    fn failures_end_the_loop_except_the_non_finite_state() {
        let init = Command::init(SpectralGrid::new(16, Dealias::TwoThirds), 0.1).to_line();
        let step = Command::Step { dt: 0.5 }.to_line();
        let steps = [init, step.clone(), step];
        let (r, rs) = serve_fakes(1, &steps, true, || Fake {
            non_finite_step: true,
            ..Fake::default()
        });
        assert_eq!(r.unwrap_err(), "rank 1: rank 0 is gone (its pipe closed)");
        assert_eq!(rs.len(), 3);
        assert!(rs[1].non_finite && rs[2].non_finite);

        let (r, rs) = serve_fakes(3, &steps, false, || Fake {
            broken: true,
            ..Fake::default()
        });
        assert_eq!(r.unwrap_err(), "rank 3: the GPU fell off");
        assert_eq!(rs.len(), 2, "the loop stops at the first failure");
        assert_eq!(rs[1].error.as_deref(), Some("the GPU fell off"));
        assert!(!rs[1].non_finite);

        // A command before init, and a line that is not a command.
        let (r, _) = serve_fakes(1, &[step_line()], false, Fake::default);
        assert!(r.unwrap_err().contains("before the solver was made"));
        let (r, _) = serve_fakes(1, &["{".into()], false, Fake::default);
        assert!(r.unwrap_err().contains("is not a command"));
    }

    fn step_line() -> String {
        Command::Step { dt: 1.0 }.to_line()
    }

    /// The end of a rank's stdin raises its abort signal (so a collective in flight gives up)
    /// and ends the command stream.
    #[test]
    fn the_end_of_stdin_raises_the_signal() {
        let abort = AbortSignal::new();
        let rx = lines_until_closed(std::io::Cursor::new(b"a\nb\n".to_vec()), abort.clone());
        assert_eq!(rx.recv().unwrap(), Some("a".into()));
        assert_eq!(rx.recv().unwrap(), Some("b".into()));
        assert_eq!(rx.recv().unwrap(), None);
        assert!(abort.reason().unwrap().contains("rank 0 is gone"));
    }

    #[test]
    fn splits_are_checked_on_both_grids() {
        // 2/3: M = N = 24 over 4 ranks, K = 7: fine.
        assert_eq!(
            check_split(SpectralGrid::new(24, Dealias::TwoThirds), 4),
            Ok(())
        );
        // 3/2: M = 36 over 4 ranks is 9 planes, N = 24 is 6: fine; over 8 ranks M fails.
        assert_eq!(
            check_split(SpectralGrid::new(24, Dealias::ThreeHalves), 4),
            Ok(())
        );
        let e = check_split(SpectralGrid::new(24, Dealias::ThreeHalves), 8).unwrap_err();
        assert!(e.contains("36 is not divisible by 8"), "{e}");
        // 3/2 with n = 20: M = 30 over 3 ranks is fine, but N = 20 is not.
        let e = check_split(SpectralGrid::new(20, Dealias::ThreeHalves), 3).unwrap_err();
        assert!(
            e.contains("solution grid 20³") && e.contains("3 slabs"),
            "{e}"
        );
        // Too few k_z values for the ranks.
        let e = check_split(SpectralGrid::new(8, Dealias::TwoThirds), 8).unwrap_err();
        assert!(e.contains("more than the"), "{e}");
    }
}
