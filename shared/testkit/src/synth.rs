//! Synthetic training runs, written through the real [`TraceWriter`].
//!
//! Why it exists: the analysis, the benchmarks, the golden traces and the demo all need traces
//! whose ground truth is known exactly (the planted leak is 12 MiB per step, eval keeps 1 GiB,
//! ...). A small simulation of a caching allocator under a training loop gives realistic shapes
//! (activations ramp up in forward and drain in backward, reserved only grows in 2 MiB segments,
//! host RSS jitters by pages) with every fault a knob. It is deterministic for a given seed.

use std::io::Write;

use oomscope_format::EncodeError;
use oomscope_format::{
    AllocatorStats, BatchTrial, ComponentBreakdown, CounterKind, ExitStatus, GpuInfo,
    GradientSummary, Metadata, Name, OomEvent, OomSource, Phase, ProcessExit, Record, StageMark,
    TensorStats, TrialOutcome,
};
use oomscope_format::{TraceWriter, WriterOptions};

use oomscope_format::AllocatorQuantity;
use oomscope_format::units::{GIB, MIB};
const PAGE: u64 = 4096;
/// The caching allocator grows reserved memory in segments of this size.
const SEGMENT_BYTES: u64 = 2 * MIB;

/// The stages marked in every training step, with where in the step (as a fraction) they fall.
pub const TRAIN_STAGES: [(&str, f64); 5] = [
    ("pre_forward", 0.0),
    ("post_forward", 0.35),
    ("pre_backward", 0.40),
    ("post_backward", 0.80),
    ("post_optimizer_step", 0.95),
];

/// A simulated training run. Every field is a knob; see [`TrainingRun::default`] for a
/// realistic mid-size model on an 80 GiB GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingRun {
    /// Training steps to run.
    pub steps: u64,
    /// Wall time of one step, in microseconds.
    pub step_us: u64,
    /// Sampling interval of the counters, in microseconds.
    pub sample_interval_us: u64,
    /// Interval of the (slow) per-process GPU memory query, in microseconds.
    pub process_poll_us: u64,
    /// Samples per step in the batch.
    pub batch_size: u64,
    /// Bytes of parameters.
    pub parameters_bytes: u64,
    /// Optimizer state as a multiple of the parameters (Adam: 2).
    pub optimizer_factor: f64,
    /// Activation bytes per sample at the end of forward.
    pub activation_bytes_per_sample: u64,
    /// Device memory.
    pub gpu_total_bytes: u64,
    /// CUDA context and other memory outside the caching allocator.
    pub context_bytes: u64,
    /// Bytes kept alive per training step (a planted leak).
    pub leak_bytes_per_step: u64,
    /// Run `eval_steps` evaluation steps after every this many training steps.
    pub eval_every: Option<u64>,
    /// Evaluation steps per evaluation.
    pub eval_steps: u64,
    /// Evaluation keeps autograd graphs: its activations as a fraction of training's.
    pub eval_activation_fraction: f64,
    /// Bytes each evaluation leaves allocated afterwards (outputs kept on the device).
    pub eval_retained_bytes: u64,
    /// Cached-but-unallocated bytes the allocator holds beyond its high-water mark.
    pub fragmentation_bytes: u64,
    /// Allocator retries per step after the first step (0 for none).
    pub alloc_retries_per_step: u64,
    /// Step at which the run dies of CUDA OOM in forward, if any.
    pub oom_at_step: Option<u64>,
    /// Whether marks carry the allocator's statistics (instrumented run) or not (plain NVML run).
    pub allocator_stats: bool,
    /// Write a batch-size search before training.
    pub batch_search: bool,
    /// First step whose gradients hold NaN, if any.
    pub nan_at_step: Option<u64>,
    /// Record tensor statistics of two activations every this many steps (0: never).
    pub tensor_stats_every: u64,
    /// Deterministic noise seed.
    pub seed: u64,
    /// Writer tuning.
    pub writer: WriterOptions,
    /// The host it ran on (the run's identity with the pid and start time).
    pub host: String,
}

impl Default for TrainingRun {
    fn default() -> TrainingRun {
        TrainingRun {
            steps: 200,
            step_us: 250_000,
            sample_interval_us: 10_000,
            process_poll_us: 1_000_000,
            batch_size: 16,
            parameters_bytes: 2 * GIB,
            optimizer_factor: 2.0,
            activation_bytes_per_sample: 320 * MIB,
            gpu_total_bytes: 80 * GIB,
            context_bytes: 520 * MIB,
            leak_bytes_per_step: 0,
            eval_every: None,
            eval_steps: 10,
            eval_activation_fraction: 0.3,
            eval_retained_bytes: 0,
            fragmentation_bytes: 256 * MIB,
            alloc_retries_per_step: 0,
            oom_at_step: None,
            allocator_stats: true,
            batch_search: false,
            nan_at_step: None,
            tensor_stats_every: 0,
            seed: 7,
            writer: WriterOptions::default(),
            host: "synth-node-01".into(),
        }
    }
}

impl TrainingRun {
    /// The benchmark workload of the foundation issue: 1 hour at 1 kHz with 6 counters and
    /// 10 000 steps × 5 stages, allocator snapshots at every mark.
    pub fn hour_at_1khz() -> TrainingRun {
        TrainingRun {
            steps: 10_000,
            step_us: 360_000,
            sample_interval_us: 1_000,
            ..TrainingRun::default()
        }
    }

    /// The memory that stays allocated between steps before any leak: parameters, gradients and
    /// optimizer state.
    pub fn static_bytes(&self) -> u64 {
        self.parameters_bytes * 2 + self.optimizer_bytes()
    }

    /// Optimizer state in bytes.
    pub fn optimizer_bytes(&self) -> u64 {
        (self.parameters_bytes as f64 * self.optimizer_factor) as u64
    }

    /// Activation bytes of one full training batch.
    pub fn activation_bytes(&self) -> u64 {
        self.activation_bytes_per_sample * self.batch_size
    }

    /// Writes the run into memory.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.write_to(Vec::new())
            .expect("writing to a Vec cannot fail")
    }

    /// Writes the run to `out`.
    pub fn write_to<W: Write>(&self, out: W) -> Result<W, EncodeError> {
        Simulation::new(self).run(out)
    }
}

/// splitmix64: tiny, deterministic, good enough for jitter.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in [-range, range].
    fn jitter(&mut self, range: u64) -> i64 {
        (self.next() % (2 * range + 1)) as i64 - range as i64
    }
}

/// State of the simulated allocator and host.
struct Simulation<'a> {
    run: &'a TrainingRun,
    rng: Rng,
    /// Bytes that stay allocated across steps (grows with leaks and eval retention).
    resident_bytes: u64,
    reserved_bytes: u64,
    peak_allocated_bytes: u64,
    retries: u64,
    host_rss_bytes: u64,
    host_available_bytes: u64,
    process_gpu_bytes: u64,
    next_process_poll_us: u64,
}

/// What the program is doing in a step of the simulation.
#[derive(Clone, Copy)]
struct StepKind {
    phase: Phase,
    activation_bytes: u64,
}

impl<'a> Simulation<'a> {
    fn new(run: &'a TrainingRun) -> Simulation<'a> {
        Simulation {
            run,
            rng: Rng(run.seed),
            resident_bytes: run.parameters_bytes,
            reserved_bytes: 0,
            peak_allocated_bytes: 0,
            retries: 0,
            host_rss_bytes: 3 * GIB + 512 * MIB,
            host_available_bytes: 200 * GIB,
            process_gpu_bytes: 0,
            next_process_poll_us: 0,
        }
    }

    fn metadata(&self) -> Metadata {
        Metadata {
            host: self.run.host.clone(),
            pid: 4242,
            command: vec![
                "python".into(),
                "train.py".into(),
                format!("--batch-size={}", self.run.batch_size),
            ],
            start_unix_ns: 1_790_000_000_000_000_000,
            collector_version: concat!("oomscope-synth ", env!("CARGO_PKG_VERSION")).into(),
            sample_interval_us: self.run.sample_interval_us,
            rank: Some(0),
            world_size: Some(1),
            gpus: vec![GpuInfo {
                index: 0,
                name: "Synthetic H100 80GB".into(),
                uuid: "GPU-00000000-1111-2222-3333-444444444444".into(),
                total_memory_bytes: self.run.gpu_total_bytes,
                driver_version: "580.00".into(),
                cuda_version: "13.0".into(),
            }],
        }
    }

    /// Allocated bytes at fraction `f` of a step: activations ramp up through forward, hold, and
    /// drain through backward while gradients appear.
    fn allocated_at(&self, kind: StepKind, f: f64, step_index: u64) -> u64 {
        let act = kind.activation_bytes as f64;
        let activations = if f < 0.35 {
            act * f / 0.35
        } else if f < 0.40 || kind.phase == Phase::Eval {
            act
        } else if f < 0.80 {
            act * (0.80 - f) / 0.40
        } else {
            0.0
        };
        // Gradients exist from the first backward on (kept across steps, zeroed in place).
        let grads = if step_index > 0 || (kind.phase == Phase::Train && f >= 0.40) {
            self.run.parameters_bytes
        } else {
            0
        };
        // Optimizer state appears at the first optimizer step.
        let optimizer = if step_index > 0 || (kind.phase == Phase::Train && f >= 0.95) {
            self.run.optimizer_bytes()
        } else {
            0
        };
        self.resident_bytes + grads + optimizer + activations as u64
    }

    /// The allocator takes memory from the device in segments and never gives it back here.
    fn allocate(&mut self, allocated: u64) {
        self.peak_allocated_bytes = self.peak_allocated_bytes.max(allocated);
        let want = allocated.div_ceil(SEGMENT_BYTES) * SEGMENT_BYTES + self.run.fragmentation_bytes;
        if want > self.reserved_bytes {
            self.reserved_bytes = want;
        }
    }

    fn snapshot(&self, allocated: u64) -> AllocatorStats {
        AllocatorStats {
            allocated_bytes: allocated,
            reserved_bytes: self.reserved_bytes,
            active_bytes: allocated,
            inactive_split_bytes: self.run.fragmentation_bytes / 2,
            peak_allocated_bytes: self.peak_allocated_bytes,
            peak_reserved_bytes: self.reserved_bytes,
            num_alloc_retries: self.retries,
            num_ooms: 0,
        }
    }

    fn run<W: Write>(mut self, out: W) -> Result<W, EncodeError> {
        let run = self.run;
        let mut w = TraceWriter::with_options(out, &self.metadata(), run.writer)?;
        let used = w.declare_counter(CounterKind::GpuUsed, Some(0))?;
        let free = w.declare_counter(CounterKind::GpuFree, Some(0))?;
        let process = w.declare_counter(CounterKind::ProcessGpu, Some(0))?;
        let reserved =
            w.declare_counter(CounterKind::Allocator(AllocatorQuantity::Reserved), Some(0))?;
        let rss = w.declare_counter(CounterKind::HostRss, None)?;
        let available = w.declare_counter(CounterKind::HostAvailable, None)?;

        let mut t_us = 0u64;
        if run.batch_search {
            t_us = self.batch_search(&mut w)?;
        }
        let mut step_index = 0u64;
        let mut train_steps_done = 0u64;
        let mut epoch_steps = 0u64;
        let train_kind = StepKind {
            phase: Phase::Train,
            activation_bytes: run.activation_bytes(),
        };
        let eval_kind = StepKind {
            phase: Phase::Eval,
            activation_bytes: (run.activation_bytes() as f64 * run.eval_activation_fraction) as u64,
        };
        while train_steps_done < run.steps {
            let in_eval = run.eval_every.is_some_and(|every| {
                train_steps_done > 0 && train_steps_done.is_multiple_of(every)
            }) && epoch_steps < run.eval_steps;
            let kind = if in_eval { eval_kind } else { train_kind };
            let step = train_steps_done;
            let stages: &[(&str, f64)] = if in_eval {
                &TRAIN_STAGES[..2]
            } else {
                &TRAIN_STAGES
            };
            let mut next_stage = 0usize;
            let step_start = t_us;
            let mut oomed = false;
            // One step: advance the sampling clock; marks fall at their exact stage times,
            // between samples, whatever the sampling interval.
            let step_end = step_start + run.step_us;
            while t_us < step_end || next_stage < stages.len() {
                let sample_due = t_us < step_end;
                let mark_due = stages
                    .get(next_stage)
                    .map(|(_, frac)| step_start + (frac * run.step_us as f64) as u64);
                if let Some(t_mark) = mark_due.filter(|t| !sample_due || *t <= t_us) {
                    let f = stages[next_stage].1;
                    let allocated = self.allocated_at(kind, f, step_index);
                    if kind.phase == Phase::Train
                        && run.oom_at_step == Some(step)
                        && allocated + self.run.context_bytes > run.gpu_total_bytes
                    {
                        self.oom(&mut w, t_mark, step, allocated)?;
                        oomed = true;
                        break;
                    }
                    self.allocate(allocated);
                    let snapshot = run.allocator_stats.then(|| self.snapshot(allocated));
                    w.write(&Record::Mark(StageMark {
                        t_us: t_mark,
                        name: stages[next_stage].0.into(),
                        step,
                        epoch: (step / 1000) as u32,
                        phase: kind.phase,
                        allocator: snapshot,
                        pid: None,
                        rank: None,
                    }))?;
                    next_stage += 1;
                    continue;
                }
                let f = (t_us - step_start) as f64 / run.step_us as f64;
                let allocated = self.allocated_at(kind, f, step_index);
                if kind.phase == Phase::Train
                    && run.oom_at_step == Some(step)
                    && allocated + self.run.context_bytes > run.gpu_total_bytes
                {
                    self.oom(&mut w, t_us, step, allocated)?;
                    oomed = true;
                    break;
                }
                self.allocate(allocated);
                self.host_tick();
                if t_us >= self.next_process_poll_us {
                    self.process_gpu_bytes = self.reserved_bytes + run.context_bytes;
                    self.next_process_poll_us = t_us + run.process_poll_us;
                }
                let jitter = self.rng.jitter(40);
                let device_used = self.reserved_bytes + run.context_bytes;
                w.sample(
                    t_us.saturating_add_signed(jitter),
                    &[
                        (used, device_used),
                        (free, run.gpu_total_bytes.saturating_sub(device_used)),
                        (process, self.process_gpu_bytes),
                        (reserved, self.reserved_bytes),
                        (rss, self.host_rss_bytes),
                        (available, self.host_available_bytes),
                    ],
                )?;
                t_us += run.sample_interval_us;
            }
            t_us = t_us.max(step_end);
            if oomed {
                break;
            }
            if kind.phase == Phase::Train {
                self.after_train_step(&mut w, t_us, step)?;
                train_steps_done += 1;
                epoch_steps = 0;
            } else {
                epoch_steps += 1;
                if epoch_steps == run.eval_steps {
                    self.resident_bytes += run.eval_retained_bytes;
                }
            }
            step_index += 1;
        }
        let exit_status = if run.oom_at_step.is_some_and(|s| s < run.steps) {
            ExitStatus::Code(1)
        } else {
            ExitStatus::Code(0)
        };
        w.write(&Record::Exit(ProcessExit {
            t_us,
            status: exit_status,
            probable_host_oom: false,
        }))?;
        w.finish(t_us)
    }

    fn after_train_step<W: Write>(
        &mut self,
        w: &mut TraceWriter<W>,
        t_us: u64,
        step: u64,
    ) -> Result<(), EncodeError> {
        let run = self.run;
        self.resident_bytes += run.leak_bytes_per_step;
        if step > 0 {
            self.retries += run.alloc_retries_per_step;
        }
        if step == 1 {
            w.write(&Record::Components(ComponentBreakdown {
                t_us,
                step,
                batch_size: Some(run.batch_size),
                parameters_bytes: run.parameters_bytes,
                buffers_bytes: 0,
                gradients_bytes: run.parameters_bytes,
                optimizer_state_bytes: run.optimizer_bytes(),
                extras: Vec::new(),
                optimizers: Vec::new(),
                parameter_count: None,
                trainable_parameter_count: None,
            }))?;
        }
        let nan = run.nan_at_step.is_some_and(|s| step >= s);
        w.write(&Record::Gradients(GradientSummary {
            t_us,
            step,
            params_with_grad: 148,
            gradient_bytes: run.parameters_bytes,
            global_norm: if nan {
                f64::NAN
            } else {
                0.8 + self.rng.unit() * 0.4
            },
            nan_count: if nan { 1024 } else { 0 },
            inf_count: 0,
        }))?;
        if run.tensor_stats_every > 0 && step.is_multiple_of(run.tensor_stats_every) {
            let dtype: Name = "f32".into();
            for (name, scale) in [("block3.out", 1.0), ("lm_head.logits", 8.0)] {
                w.write(&Record::Tensor(TensorStats {
                    t_us,
                    step,
                    name: name.into(),
                    shape: vec![run.batch_size, 512, 1024],
                    dtype: dtype.clone(),
                    bytes: run.batch_size * 512 * 1024 * 4,
                    min: -3.0 * scale,
                    max: 3.0 * scale,
                    mean: 0.01 * self.rng.unit(),
                    std: scale,
                    nan_count: 0,
                    inf_count: 0,
                }))?;
            }
        }
        Ok(())
    }

    fn oom<W: Write>(
        &mut self,
        w: &mut TraceWriter<W>,
        t_us: u64,
        step: u64,
        allocated: u64,
    ) -> Result<(), EncodeError> {
        let run = self.run;
        let free = run
            .gpu_total_bytes
            .saturating_sub(self.reserved_bytes + run.context_bytes);
        let requested = allocated
            .saturating_sub(self.reserved_bytes)
            .max(free + 64 * MIB);
        w.write(&Record::Oom(OomEvent {
            t_us,
            source: OomSource::Stderr,
            stage: Some("post_forward".into()),
            step: Some(step),
            requested_bytes: Some(requested),
            device: Some(0),
            device_free_bytes: Some(free),
            device_total_bytes: Some(run.gpu_total_bytes),
            message: format!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {:.2} GiB. GPU 0 has a total capacity of {:.2} GiB of which {:.2} GiB is free.",
                requested as f64 / GIB as f64,
                run.gpu_total_bytes as f64 / GIB as f64,
                free as f64 / GIB as f64
            ),
            pid: None,
            rank: None,
            allocated_bytes: None,
            reserved_bytes: None,
        }))
    }

    /// Host memory moves by pages, as RSS really does (allocator arenas, data-loader buffers).
    fn host_tick(&mut self) {
        if self.rng.unit() < 0.2 {
            let pages = self.rng.jitter(16);
            self.host_rss_bytes = self
                .host_rss_bytes
                .saturating_add_signed(pages * PAGE as i64);
        }
        if self.rng.unit() < 0.3 {
            let pages = self.rng.jitter(64);
            self.host_available_bytes = self
                .host_available_bytes
                .saturating_add_signed(pages * PAGE as i64);
        }
    }

    /// Doubles the batch from 1 until it no longer fits, as a batch-size finder does.
    fn batch_search<W: Write>(&mut self, w: &mut TraceWriter<W>) -> Result<u64, EncodeError> {
        let run = self.run;
        let fixed = self.run.static_bytes() + run.context_bytes;
        let mut t_us = 0;
        let mut batch = 1u64;
        loop {
            t_us += run.step_us;
            let peak = fixed + batch * run.activation_bytes_per_sample;
            let fits = peak <= run.gpu_total_bytes;
            w.write(&Record::Trial(BatchTrial {
                t_us,
                batch_size: batch,
                outcome: if fits {
                    TrialOutcome::Fit
                } else {
                    TrialOutcome::Oom
                },
                peak_bytes: fits.then_some(peak - run.context_bytes),
            }))?;
            if !fits || batch >= 1 << 16 {
                break;
            }
            batch *= 2;
        }
        Ok(t_us)
    }
}

/// One node of a distributed job as one collector records it (`collector run -- torchrun
/// --nproc-per-node N`): the launcher and its ranks (PROCESS records), one GPU per rank (device
/// `used` and the rank's own `pid_gpu`), each rank's RSS (`pid_rss`), the tree's RSS and the
/// host's available memory, and every rank marking four stages a step. Deterministic: the
/// workload of the ranks' benchmarks (report size and first chart for 8 ranks × 1 hour, a job
/// of 64 traces merged).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRun {
    /// The node's host name.
    pub host: String,
    /// Ranks on the node.
    pub ranks: u32,
    /// The global rank of the first.
    pub first_rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// How long it runs.
    pub seconds: u64,
    /// Sampling period.
    pub sample_interval_us: u64,
    /// One training step.
    pub step_us: u64,
    /// When it started (the job's traces are aligned on this).
    pub start_unix_ns: u64,
}

impl Default for NodeRun {
    fn default() -> NodeRun {
        NodeRun {
            host: "node-0".into(),
            ranks: 8,
            first_rank: 0,
            world_size: 8,
            seconds: 3600,
            sample_interval_us: 10_000,
            step_us: 1_000_000,
            start_unix_ns: 1_790_000_000_000_000_000,
        }
    }
}

impl NodeRun {
    /// Writes the node's trace into memory.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.write_to(Vec::new())
            .expect("writing to a Vec cannot fail")
    }

    /// Writes the node's trace to `out`.
    pub fn write_to<W: Write>(&self, out: W) -> Result<W, EncodeError> {
        // Launchers of different nodes (or tasks) have pids of their own.
        let launcher = 1000 + 20 * self.first_rank;
        let pid = |i: u32| launcher + 1 + i;
        let metadata = Metadata {
            host: self.host.clone(),
            pid: launcher,
            command: vec![
                "torchrun".into(),
                format!("--nproc-per-node={}", self.ranks),
                "train.py".into(),
            ],
            start_unix_ns: self.start_unix_ns,
            collector_version: concat!("oomscope-synth ", env!("CARGO_PKG_VERSION")).into(),
            sample_interval_us: self.sample_interval_us,
            rank: None,
            world_size: None,
            gpus: (0..self.ranks)
                .map(|i| GpuInfo {
                    index: i,
                    name: "Synthetic H100 80GB".into(),
                    uuid: format!("GPU-{i:08}-1111-2222-3333-444444444444"),
                    total_memory_bytes: 80 * GIB,
                    driver_version: "580.00".into(),
                    cuda_version: "13.0".into(),
                })
                .collect(),
        };
        let mut w = TraceWriter::new(out, &metadata)?;
        let process = |p: u32, role: oomscope_format::ProcessRole, rank: Option<u32>| {
            Record::Process(oomscope_format::ProcessInfo {
                t_us: 1_000,
                pid: p,
                parent_pid: (p != launcher).then_some(launcher),
                name: if p == launcher { "torchrun" } else { "python" }.into(),
                role,
                rank_from: if rank.is_some() {
                    oomscope_format::RankSource::Environment
                } else {
                    oomscope_format::RankSource::None
                },
                rank,
                local_rank: rank.map(|r| r - self.first_rank),
                world_size: rank.map(|_| self.world_size),
                restart: rank.map(|_| 0),
                group: None,
                start: oomscope_format::StartMethod::Unknown,
            })
        };
        w.write(&process(
            launcher,
            oomscope_format::ProcessRole::Launcher,
            None,
        ))?;
        for i in 0..self.ranks {
            w.write(&process(
                pid(i),
                oomscope_format::ProcessRole::Rank,
                Some(self.first_rank + i),
            ))?;
        }
        let tree_rss = w.declare_counter(CounterKind::HostRss, None)?;
        let available = w.declare_counter(CounterKind::HostAvailable, None)?;
        let mut used = Vec::new();
        let mut rank_rss = Vec::new();
        let mut rank_gpu = Vec::new();
        for i in 0..self.ranks {
            used.push(w.declare_counter(CounterKind::GpuUsed, Some(i))?);
            rank_rss.push(w.declare_process_counter(CounterKind::PidRss, None, pid(i))?);
            rank_gpu.push(w.declare_process_counter(CounterKind::PidGpu, Some(i), pid(i))?);
        }
        let end_us = self.seconds * 1_000_000;
        let mut rng = Rng(u64::from(self.first_rank) + 1);
        let mut row = Vec::with_capacity(2 + 3 * self.ranks as usize);
        let mut next_mark_us = self.step_us / 10;
        let mut t_us = 0;
        while t_us < end_us {
            // The stage marks due by now, each rank's (the ranks keep step together).
            while next_mark_us <= t_us {
                let step = next_mark_us / self.step_us;
                let stage = (next_mark_us % self.step_us) * 4 / self.step_us;
                let name = [
                    "pre_forward",
                    "post_forward",
                    "post_backward",
                    "post_optimizer_step",
                ][stage as usize];
                for i in 0..self.ranks {
                    w.write(&Record::Mark(StageMark {
                        t_us: next_mark_us + u64::from(i) * 50,
                        name: name.into(),
                        step,
                        phase: Phase::Train,
                        pid: Some(pid(i)),
                        rank: Some(self.first_rank + i),
                        ..StageMark::default()
                    }))?;
                }
                next_mark_us += self.step_us / 4;
            }
            // Activations rise through forward and drain through backward.
            let f = (t_us % self.step_us) as f64 / self.step_us as f64;
            let activations =
                (if f < 0.5 { f * 2.0 } else { (1.0 - f) * 2.0 } * 20.0 * GIB as f64) as u64;
            row.clear();
            let mut tree = 300 * MIB;
            for i in 0..self.ranks {
                let rss = 6 * GIB + (rng.next() % 64) * PAGE;
                let gpu = 30 * GIB + activations + u64::from(i) * 256 * MIB;
                tree += rss;
                row.push((rank_rss[i as usize], rss));
                row.push((rank_gpu[i as usize], gpu));
                row.push((used[i as usize], gpu + 600 * MIB));
            }
            row.push((tree_rss, tree));
            row.push((available, (1 << 40) - tree));
            w.sample(t_us, &row)?;
            t_us += self.sample_interval_us;
        }
        w.finish(end_us)
    }
}
