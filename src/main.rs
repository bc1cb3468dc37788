//! The `vpm` binary: parse the command line, set up logging and threads, call the library.

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vpm::cli::{BenchCommand, Cli, Command, DealiasArg, TestingArgs, TransformArg};
use vpm::config::{named_cases, resolve_case, Case, Dealias};
use vpm::console::{self, Short, StderrLog, Stream};
use vpm::output::create_locked_run_dir;
use vpm::run::memory;
use vpm::run::simulation::{ResumeChanges, Run};
use vpm::run::{ProgressStyle, RunEnd, RunOptions};
use vpm::spectral::gpu::TransformKind;
use vpm::{out, say};

fn main() -> ExitCode {
    // NVLink multicast can take a shared host's GPUs out of service: off for this process and
    // the ranks it starts unless the user set it, before any thread reads the environment.
    vpm::device::nccl::disable_nvls_unless_set();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    let level = if cli.quiet {
        "error"
    } else {
        match cli.verbose {
            0 => "info",
            1 => "debug",
            _ => "trace",
        }
    };
    // The log goes through the console's stderr: a closed pipe or a full device silences it
    // and the command goes on.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VPM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(StderrLog)
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .init();
    let code = match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("error: {e:#}");
            ExitCode::FAILURE
        }
    };
    exit_code_after_stdout(code)
}

/// `code`, or a failure when stdout could not be written (reported in one line, or quietly
/// for a closed pipe: [`console::report_stdout_error`]).
fn exit_code_after_stdout(code: ExitCode) -> ExitCode {
    if console::report_stdout_error() {
        ExitCode::FAILURE
    } else {
        code
    }
}

/// Help, the version or a usage error from clap, written through the console (never a
/// panic): clap's status (0 for help and version, 2 for a usage error), or 1 when stdout
/// failed.
fn clap_exit(e: &clap::Error) -> ExitCode {
    let (stream, terminal) = if e.use_stderr() {
        (Stream::Err, std::io::stderr().is_terminal())
    } else {
        (Stream::Out, std::io::stdout().is_terminal())
    };
    let text = e.render();
    if terminal {
        console::write(stream, format_args!("{}", text.ansi()));
    } else {
        console::write(stream, format_args!("{text}"));
    }
    let code = u8::try_from(e.exit_code()).unwrap_or(1);
    exit_code_after_stdout(ExitCode::from(code))
}

/// Builds the global thread pool once; returns the thread count.
fn set_threads(threads: Option<usize>) -> Result<usize> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        b = b.num_threads(n);
    }
    b.build_global().context("starting the thread pool")?;
    Ok(rayon::current_num_threads())
}

/// The options of `vpm run` and `vpm resume`, with the testing aids set up (the injected write
/// failure) and the signal handlers installed.
fn run_options(threads: usize, quiet: bool, testing: &TestingArgs) -> Result<RunOptions> {
    if let Some(name) = &testing.fail_write {
        vpm::output::fail_writes_of(name);
    }
    let options = RunOptions {
        threads,
        progress: progress_style(quiet),
        abort_after_steps: testing.abort_after_steps,
        signal_in_step: testing.signal_in_step,
    };
    vpm::run::install_signal_handlers(options.progress)?;
    Ok(options)
}

fn progress_style(quiet: bool) -> ProgressStyle {
    if quiet {
        ProgressStyle::Quiet
    } else if std::io::stderr().is_terminal() {
        ProgressStyle::Bar
    } else {
        ProgressStyle::Lines
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(args) => {
            let (mut case, _text) = resolve_case(&args.case)?;
            if let Some(d) = args.device {
                // Recorded in the run's case.toml, so `vpm resume` keeps it.
                case.set_device(d);
            }
            // Every check `vpm check` makes (a device that cannot be had, a case too big for
            // the memory or whose outputs would not fit on the disk) fails before a run
            // directory is made.
            let parent = args
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_RUNS));
            // The thread pool first: the plan may sample bodies or particles in parallel and
            // weighs the CPU evaluators by the thread count.
            let threads = set_threads(args.threads)?;
            let plan = vpm::run::checked_plan(&case, &parent)?;
            let (run_dir, lock, cleanup) =
                create_locked_run_dir(&case.name, args.out.as_deref(), args.force, "vpm run")?;
            if let Some(line) = cleanup.summary().filter(|_| !cli.quiet) {
                say!("vpm: {line}");
            }
            if !cli.quiet {
                say!(
                    "vpm: case `{}` → {} ({} threads)",
                    case.name,
                    run_dir.display(),
                    threads
                );
            }
            let options = run_options(threads, cli.quiet, &args.testing)?;
            let prepared = vpm::run::Prepared { plan, lock };
            let mut sim = vpm::run::start(case, &run_dir, options, Some(prepared))?;
            finish(sim.as_mut(), cli.quiet)
        }
        Command::Resume(args) => {
            let threads = set_threads(args.threads)?;
            let options = run_options(threads, cli.quiet, &args.testing)?;
            let changes = ResumeChanges {
                t_end: args.t_end,
                device: args.device,
            };
            let mut sim = vpm::run::resume(&args.run_dir, options, &changes)?;
            if !cli.quiet && !sim.is_finished() {
                if sim.time() >= sim.case().time.t_end {
                    say!(
                        "vpm: `{}` in {} reached t_end = {} (step {}) but its final outputs \
                         were not all written; writing them (final field, plots, manifest)",
                        sim.case().name,
                        args.run_dir.display(),
                        Short(sim.case().time.t_end),
                        sim.step_count()
                    );
                } else {
                    say!(
                        "vpm: resuming `{}` in {} at step {} (t = {}, t_end = {})",
                        sim.case().name,
                        args.run_dir.display(),
                        sim.step_count(),
                        Short(sim.time()),
                        Short(sim.case().time.t_end)
                    );
                }
            }
            finish(sim.as_mut(), cli.quiet)
        }
        Command::Check(args) => check(&args.case, args.threads),
        Command::Rank => vpm::spectral::distributed::rank_main().map_err(anyhow::Error::msg),
        Command::Cases => {
            let width = named_cases()
                .iter()
                .map(|c| c.name.len())
                .max()
                .unwrap_or(0);
            for c in named_cases() {
                out!("{:width$}  {}", c.name, c.summary);
            }
            Ok(())
        }
        Command::Plot { run_dir } => {
            let title = case_name(&run_dir);
            // The pictures' settings come from the run's case; a run directory without one
            // (or with one this version cannot read) is drawn with the defaults.
            let options = match Case::from_file(&run_dir.join(postprocess::layout::CASE_TOML)) {
                Ok(case) => vpm::run::plot_options(&case),
                Err(e) => {
                    if run_dir.join(postprocess::layout::CASE_TOML).is_file() {
                        tracing::warn!("{e}; drawing with the default settings");
                    }
                    postprocess::PlotOptions::default()
                }
            };
            for p in postprocess::plot_run_with(&run_dir, &title, &options)? {
                out!("{}", p.display());
            }
            Ok(())
        }
        Command::Bench(command) => bench(command, cli.quiet),
        Command::Verify(vpm::cli::VerifyCommand::Periodic(a)) => verify_periodic(a, cli.quiet),
    }
}

/// `vpm bench …`: checks the arguments, then runs the benchmark.
fn bench(command: BenchCommand, quiet: bool) -> Result<()> {
    let common = match &command {
        BenchCommand::Spectral(a) => &a.common,
        BenchCommand::Direct(a) => &a.common,
        BenchCommand::Ewald(a) => &a.common,
        BenchCommand::Kernel(a) => &a.common,
        BenchCommand::Step(a) => &a.common,
        BenchCommand::Fmm(a) => &a.common,
        BenchCommand::Gravity(a) => &a.common,
    };
    set_threads(common.threads)?;
    let (repeats, json) = (common.repeats, common.json.clone());
    let json = json.as_deref();
    // Every size list has a smallest allowed value.
    let at_least = |values: &[usize], min: usize, what: &str| -> Result<()> {
        match values.iter().find(|&&n| n < min) {
            Some(n) => bail!("--n {n}: {what} must be at least {min}"),
            None => Ok(()),
        }
    };
    match command {
        BenchCommand::Spectral(a) => {
            let rules: Vec<Dealias> = a
                .dealias
                .iter()
                .map(|d| match d {
                    DealiasArg::TwoThirds => Dealias::TwoThirds,
                    DealiasArg::ThreeHalves => Dealias::ThreeHalves,
                })
                .collect();
            at_least(&a.n, 8, "grid sizes")?;
            if let Some(n) = a.n.iter().find(|&&n| n % 2 == 1) {
                bail!("--n {n}: grid sizes must be even and ≥ 8");
            }
            let (device, note) = vpm::device::Device::open(a.device).map_err(without_gpu(
                "the CPU solver is the default: leave out --device",
            ))?;
            if device.group().is_some() {
                say!("--device {}: {note}", a.device);
                vpm::bench::spectral::bench_spectral_group(
                    &device,
                    &a.n,
                    &rules,
                    repeats.unwrap_or(10),
                    json,
                )?;
            } else if device.is_cuda() {
                say!("--device {}: {note}", a.device);
                let kinds: Vec<TransformKind> = a
                    .transforms
                    .iter()
                    .map(|t| match t {
                        TransformArg::Pruned => TransformKind::Pruned,
                        TransformArg::Full => TransformKind::Full,
                    })
                    .collect();
                vpm::bench::spectral::bench_spectral_gpu(
                    &device,
                    &a.n,
                    &rules,
                    &kinds,
                    repeats.unwrap_or(10),
                    json,
                )?;
            } else {
                vpm::bench::bench_spectral(&a.n, &rules, repeats.unwrap_or(5), json)?;
            }
            Ok(())
        }
        BenchCommand::Direct(a) => {
            use vpm::summation::interaction::InteractionKind;
            let device = open_bench_device(a.device, quiet)?;
            let sizes = match (a.n.is_empty(), device.gpu()) {
                (false, _) => a.n.clone(),
                (true, None) => vec![1024, 4096, 16384],
                (true, Some(_)) => vec![16384, 65536, 262144, 1 << 20],
            };
            at_least(&sizes, 1, "particle counts")?;
            let configs = a
                .configs
                .iter()
                .map(|c| parse_kernel_config(c))
                .collect::<Result<Vec<_>>>()?;
            match (a.interaction, device.gpu()) {
                (InteractionKind::BiotSavart, None) => {
                    if !configs.is_empty() {
                        bail!("--configs: launch configurations of the GPU kernels; add --device cuda");
                    }
                    vpm::bench::bench_direct(&sizes, repeats.unwrap_or(3), json)?;
                }
                (InteractionKind::BiotSavart, Some(gpu)) => {
                    let (r, dump) = (repeats.unwrap_or(5), a.dump.as_deref());
                    vpm::bench::bench_kernel(gpu, &sizes, r, a.sample, &configs, json, dump)?;
                }
                (InteractionKind::Gravity, Some(gpu)) => {
                    let options = vpm::bench::GravityBenchOptions {
                        softening: a.softening,
                        repeats: repeats.unwrap_or(5),
                        sample: a.sample,
                        configs,
                        dump: a.dump.clone(),
                    };
                    vpm::bench::bench_direct_gravity(gpu, &sizes, &options, json)?;
                }
                (InteractionKind::Gravity, None) => {
                    if !configs.is_empty() {
                        bail!("--configs: launch configurations of the GPU kernels; add --device cuda");
                    }
                    let r = repeats.unwrap_or(3);
                    vpm::bench::bench_direct_gravity_cpu(&sizes, a.softening, r, json)?;
                }
            }
            Ok(())
        }
        BenchCommand::Ewald(a) => {
            at_least(&a.n, 4, "lattice sizes")?;
            if !(1e-12..=1e-2).contains(&a.accuracy) {
                bail!("--accuracy {}: must be in [1e-12, 1e-2]", a.accuracy);
            }
            let (device, note) = vpm::device::Device::open_single(a.device).map_err(
                without_gpu("the CPU evaluator is the default: leave out --device"),
            )?;
            if !quiet {
                say!("--device {}: {note}", a.device);
            }
            let r = repeats.unwrap_or(3);
            vpm::bench::bench_ewald(&device, &a.n, a.accuracy, r, a.sample, json)?;
            Ok(())
        }
        BenchCommand::Step(a) => {
            at_least(&a.n, 8, "lattice sizes")?;
            if let Some(n) = a.n.iter().find(|&&n| n % 2 == 1) {
                bail!("--n {n}: lattice sizes must be even and ≥ 8");
            }
            if let Some(o) = a.overlap.iter().find(|&&o| !(o > 0.0 && o <= 3.0)) {
                bail!("--overlap {o}: must be in (0, 3]");
            }
            if !(1e-12..=1e-2).contains(&a.accuracy) {
                bail!("--accuracy {}: must be in [1e-12, 1e-2]", a.accuracy);
            }
            if a.steps == 0 || a.reinit_every == 0 {
                bail!("--steps and --reinit-every must be at least 1");
            }
            let (device, note) = vpm::device::Device::open_single(a.device).map_err(without_gpu(
                "`vpm bench step --device cpu` times the host stepper (small lattices, e.g. --n 16,32)",
            ))?;
            if !quiet {
                say!("--device {}: {note}", a.device);
            }
            let options = vpm::bench::StepBenchOptions {
                overlaps: a.overlap.clone(),
                evaluator: match a.evaluator {
                    vpm::cli::EvaluatorArg::Ewald => vpm::summation::EvaluatorKind::Ewald,
                    vpm::cli::EvaluatorArg::Direct => vpm::summation::EvaluatorKind::Direct,
                    vpm::cli::EvaluatorArg::Fmm => vpm::summation::EvaluatorKind::Fmm,
                },
                accuracy: a.accuracy,
                steps: a.steps,
                warmup: a.warmup,
                reinit_every: a.reinit_every,
                rbf: match a.rbf {
                    vpm::cli::RbfArg::Spectral => vpm::vortex::RbfSolver::Spectral,
                    vpm::cli::RbfArg::Exact => vpm::vortex::RbfSolver::Exact,
                },
                sample: a.sample,
                outputs: repeats.unwrap_or(3),
            };
            vpm::bench::bench_step(&device, &a.n, &options, json)?;
            Ok(())
        }
        BenchCommand::Fmm(a) => {
            if !(a.accuracy > 0.0 && a.accuracy < 1.0) {
                bail!("--accuracy {}: must be in (0, 1)", a.accuracy);
            }
            let (device, note) = vpm::device::Device::open_single(a.device).map_err(
                without_gpu("the CPU evaluator is the default: leave out --device"),
            )?;
            if !quiet {
                say!("--device {}: {note}", a.device);
            }
            let sizes = match (a.n.is_empty(), device.is_cuda()) {
                (false, _) => a.n.clone(),
                (true, false) => vec![100_000, 1_000_000],
                (true, true) => vec![100_000, 1_000_000, 4_000_000, 16_700_000],
            };
            at_least(&sizes, 2, "particle counts")?;
            let options = vpm::bench::FmmBenchOptions {
                accuracy: a.accuracy,
                repeats: repeats.unwrap_or(3),
                sample: a.sample,
                interaction: a.interaction,
                periodic: a.periodic,
                tuning: vpm::bench::FmmTuning {
                    theta: a.theta,
                    leaf_size: a.leaf_size,
                    order: a.order,
                    m2l: a.m2l,
                },
            };
            vpm::bench::bench_fmm(&device, &sizes, &options, json)?;
            Ok(())
        }
        BenchCommand::Gravity(a) => {
            if !(a.accuracy > 0.0 && a.accuracy < 1.0) {
                bail!("--accuracy {}: must be in (0, 1)", a.accuracy);
            }
            if !(a.softening >= 0.0 && a.softening.is_finite()) {
                bail!("--softening {}: must be finite and ≥ 0", a.softening);
            }
            let device = open_bench_device(a.device, quiet)?;
            let sizes = match (a.n.is_empty(), device.is_cuda()) {
                (false, _) => a.n.clone(),
                (true, false) => vec![1_000, 10_000],
                (true, true) => vec![1_000, 10_000, 100_000, 1_000_000],
            };
            at_least(&sizes, 2, "body counts")?;
            let mut methods = a.method.clone();
            methods.dedup();
            let options = vpm::bench::NBodyBenchOptions {
                methods,
                accuracy: a.accuracy,
                softening: a.softening,
                repeats: repeats.unwrap_or(3),
                sample: a.sample,
                steps: a.steps,
            };
            vpm::bench::bench_gravity(&device, &sizes, &options, json)?;
            Ok(())
        }
        BenchCommand::Kernel(a) => {
            at_least(&a.n, 1, "particle counts")?;
            let configs = a
                .configs
                .iter()
                .map(|c| parse_kernel_config(c))
                .collect::<Result<Vec<_>>>()?;
            let (device, note) =
                vpm::device::Device::open_single(a.device).map_err(without_gpu(DIRECT_INSTEAD))?;
            let gpu = device.gpu().with_context(|| {
                format!(
                    "vpm bench kernel needs a CUDA GPU: --device {} gave {note}; {DIRECT_INSTEAD}",
                    a.device
                )
            })?;
            let r = repeats.unwrap_or(5);
            vpm::bench::bench_kernel(gpu, &a.n, r, a.sample, &configs, json, a.dump.as_deref())?;
            Ok(())
        }
    }
}

/// The device a benchmark asked for, its note printed unless `quiet`; without a usable GPU when
/// one was asked for, an error that says the CPU evaluator is the default.
fn open_bench_device(
    request: vpm::device::DeviceRequest,
    quiet: bool,
) -> Result<vpm::device::Device> {
    let (device, note) = vpm::device::Device::open_single(request).map_err(without_gpu(
        "the CPU evaluator is the default: leave out --device",
    ))?;
    if !quiet {
        say!("--device {request}: {note}");
    }
    Ok(device)
}

/// What `vpm bench kernel` points to on a machine without a GPU.
const DIRECT_INSTEAD: &str = "`vpm bench direct` times the CPU all-pairs sum";

/// A benchmark's device that could not be opened (a GPU asked for and not usable), as an error
/// that says what to run `instead` without a GPU.
fn without_gpu(instead: &str) -> impl FnOnce(vpm::device::DeviceError) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("{e}. Without a GPU, {instead}")
}

/// `BLOCKxTARGETSxUNROLL[xMINBLOCKS]`, e.g. `256x2x4`.
fn parse_kernel_config(s: &str) -> Result<vpm::summation::direct::KernelConfig> {
    let parts: Vec<u32> = s
        .split('x')
        .map(|p| p.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--configs {s}: expected BLOCKxTARGETSxUNROLL, e.g. 256x2x4"))?;
    let config =
        |block, targets_per_thread, unroll, min_blocks| vpm::summation::direct::KernelConfig {
            block,
            targets_per_thread,
            unroll,
            min_blocks,
        };
    match parts[..] {
        [b, t, u] => Ok(config(b, t, u, 0)),
        [b, t, u, m] => Ok(config(b, t, u, m)),
        _ => bail!("--configs {s}: expected BLOCKxTARGETSxUNROLL[xMINBLOCKS], e.g. 256x2x4"),
    }
}

/// Runs to the end (or writes the final outputs of a run that reached it) and reports where the
/// outputs are; a run whose manifest says `finished` is left as it is.
fn finish(sim: &mut dyn Run, quiet: bool) -> Result<()> {
    if sim.is_finished() {
        if !quiet {
            say!(
                "vpm: the run is already complete (t = {}); `vpm resume {} --t-end T` extends it",
                Short(sim.time()),
                sim.run_dir().display()
            );
        }
        return Ok(());
    }
    match sim.run_to_end()? {
        RunEnd::Finished => {
            if !quiet {
                say!(
                    "vpm: finished at t = {} after {} steps; outputs in {}",
                    Short(sim.time()),
                    sim.step_count(),
                    sim.run_dir().display()
                );
            }
            Ok(())
        }
        RunEnd::Interrupted => {
            say!(
                "vpm: interrupted at t = {} (step {}); the state is checkpointed. `vpm resume {}` \
                 continues the run.",
                Short(sim.time()),
                sim.step_count(),
                sim.run_dir().display()
            );
            std::process::exit(130);
        }
        RunEnd::Aborted => {
            // Testing aid: behave like a killed process (no final outputs, non-zero status).
            std::process::exit(137);
        }
    }
}

/// Where `vpm run` makes its run directory without `--out`.
const DEFAULT_RUNS: &str = "runs";

/// `vpm check CASE`: validates as `vpm run` does, and prints the resolved case, its memory,
/// disk and a rough time.
/// `vpm verify periodic`: the table of the two periodic methods' differences; an error (exit
/// status 1) when they disagree.
fn verify_periodic(a: vpm::cli::VerifyPeriodicArgs, quiet: bool) -> Result<()> {
    let (case, _text) = resolve_case(&a.case)?;
    set_threads(a.threads)?;
    let device = open_bench_device(a.device, quiet)?;
    let request = vpm::run::verify::VerifyRequest {
        sample: a.sample,
        accuracy: a.accuracy,
    };
    let c = vpm::run::verify::verify_periodic(&case, request, &device)
        .with_context(|| format!("vpm verify periodic {}", a.case))?;
    out!("# vpm verify periodic {}", case.name);
    out!("{c}");
    if !c.agrees() {
        anyhow::bail!(
            "case `{}`: the Ewald sum and the periodic FMM differ by more than {} × the \
             accuracy {:e} (table above)",
            case.name,
            vpm::run::verify::FAILURE_FACTOR,
            c.accuracy
        );
    }
    Ok(())
}

fn check(arg: &str, threads: Option<usize>) -> Result<()> {
    let (case, _text) = resolve_case(arg)?;
    let threads = set_threads(threads)?;
    console::write(Stream::Out, format_args!("{}", case.to_toml_string()));
    let plan = vpm::run::RunPlan::new(&case)?;
    if let Some(recipe) = &plan.evaluator {
        out!(
            "\n# Particle evaluator ({} particles): {}",
            plan.particle_count,
            recipe.description
        );
        if let Some(c) = &recipe.choice {
            out!("# {c}");
        }
    }
    if let Some(choice) = &plan.gravity_method {
        out!(
            "\n# Gravity forces ({} bodies): {}, about {:.3e} s per evaluation",
            plan.particle_count,
            choice.method,
            choice.seconds
        );
        if let Some(reason) = &choice.reason {
            out!("# {reason}");
        }
        if let Some(units) = &case.units {
            out!("# Units: {}", units.describe());
        }
    }
    let estimate = memory::estimate(&case, &plan)?;
    out!("\n# Memory (estimate of the large arrays):");
    for (part, bytes) in &estimate.host {
        out!("#   host   {:>12}  {part}", memory::human_bytes(*bytes));
    }
    for (part, bytes) in &estimate.device {
        out!("#   device {:>12}  {part}", memory::human_bytes(*bytes));
    }
    print_total(
        "host",
        estimate.host_total(),
        vpm::device::host_memory_available().map(|b| (b, "available".to_string())),
    );
    out!("\n# Disk (estimate of every file the run writes, at its peak):");
    for (part, bytes) in &estimate.disk {
        out!("#   disk   {:>12}  {part}", memory::human_bytes(*bytes));
    }
    print_total(
        "disk",
        estimate.disk_total(),
        memory::disk_space_for(Path::new(DEFAULT_RUNS))
            .map(|b| (b, format!("free for {DEFAULT_RUNS}/"))),
    );
    let (per_step, steps) = memory::rough_time(&case, &plan, threads)?;
    out!(
        "\n# Time (rough: CPU parts with {threads} threads, GPU parts at H100 rates; `vpm bench` \
         measures):"
    );
    out!("#   about {} per step", human_seconds(per_step));
    match steps {
        Some(n) => out!(
            "#   {n} steps: about {}",
            human_seconds(per_step * n as f64)
        ),
        None => {
            out!("#   adaptive dt (cfl): the number of steps is known only as the run goes")
        }
    }
    vpm::run::check_plan(&case, &plan, Path::new(DEFAULT_RUNS))
}

/// `#   host total 1.0 MiB of 2.0 GiB available`: the total of a part of `vpm check`'s
/// estimate, against what there is when that is known, saying when it does not fit.
fn print_total(what: &str, total: u64, there: Option<(u64, String)>) {
    let total_text = memory::human_bytes(total);
    match there {
        Some((room, which)) => out!(
            "#   {what} total {total_text} of {} {which}{}",
            memory::human_bytes(room),
            if total > room { ": DOES NOT FIT" } else { "" }
        ),
        None => out!("#   {what} total {total_text}"),
    }
}

fn human_seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// The case name recorded in a run directory's case.toml (the directory name if unreadable).
fn case_name(run_dir: &Path) -> String {
    Case::from_file(&run_dir.join(postprocess::layout::CASE_TOML))
        .map(|c| c.name)
        .unwrap_or_else(|_| {
            run_dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".into())
        })
}
