//! Builders for in-memory traces shaped like real training runs, for the analyses' tests.
//!
//! Each test states the one thing it plants (a leak, an eval that keeps memory, an OOM) on top of
//! a healthy default run, so the test reads as "this evidence must (not) produce that finding".

use oomscope_format::{
    AllocatorStats, ComponentBreakdown, CounterId, CounterKind, ExitStatus, GpuInfo, Metadata,
    OomEvent, OomSource, Phase, ProcessExit, StageMark, Trace,
};

use oomscope_format::AllocatorQuantity;
use oomscope_format::units::{GIB, MIB};

/// A synthetic training run. `Run::default()` is healthy: 60 steps on an 80 GiB GPU, 4 GiB of
/// parameters, 4 GiB of gradients, 8 GiB of Adam state, 12 GiB of activations at `post_forward`,
/// batch 32, a small allocator cache, a 600 MiB CUDA context, a quiet host.
#[derive(Debug, Clone)]
pub struct Run {
    /// Training steps to run.
    pub steps: u64,
    /// Number of the first step.
    pub first_step: u64,
    /// Wall time per training step.
    pub step_us: u64,
    /// Stage names of one step, in order.
    pub stages: Vec<&'static str>,
    /// Parameter bytes.
    pub parameters_bytes: u64,
    /// Gradient bytes.
    pub grads_bytes: u64,
    /// Optimizer state bytes.
    pub optimizer_bytes: u64,
    /// Activation bytes held at `post_forward` (and `pre_backward`).
    pub activations_bytes: u64,
    /// Batch size recorded in the component breakdown.
    pub batch_size: Option<u64>,
    /// Record a component breakdown at the first step.
    pub components: bool,
    /// Bytes that stay allocated after every training step.
    pub leak_bytes_per_step: u64,
    /// Run eval after every this many training steps.
    pub eval_every: Option<u64>,
    /// Eval marks per eval run.
    pub eval_marks: usize,
    /// Extra bytes allocated while evaluating.
    pub eval_jump_bytes: u64,
    /// Bytes eval leaves allocated afterwards (each eval run).
    pub eval_retained_bytes: u64,
    /// Reserved minus the highest allocated so far.
    pub fragmentation_bytes: u64,
    /// Inactive split bytes in every snapshot.
    pub inactive_split_bytes: u64,
    /// From this step on, the allocator retries this many times per step.
    pub alloc_retries_from: Option<(u64, u64)>,
    /// The run dies of a GPU OOM in the forward pass of this step.
    pub oom_at_step: Option<u64>,
    /// Bytes the failing allocation asked for.
    pub oom_requested_bytes: u64,
    /// Whether the OOM event itself names its stage and step.
    pub oom_knows_stage: bool,
    /// Total GPU memory.
    pub gpu_total_bytes: u64,
    /// Marks carry the allocator's statistics.
    pub allocator_stats: bool,
    /// Sample NVML and host counters.
    pub counters: bool,
    /// Also sample the allocator's allocated/reserved counters.
    pub allocator_counters: bool,
    /// Process GPU memory minus allocator reserved (CUDA context, NCCL, ...).
    pub context_bytes: u64,
    /// Host RSS at the start.
    pub host_rss_bytes: u64,
    /// Host RSS growth per step.
    pub host_rss_growth_per_step: u64,
    /// Host memory: RSS plus available.
    pub host_total_bytes: u64,
    /// Sample rows written before (and at) each mark.
    pub samples_per_mark: usize,
    /// Process exit; `None` keeps the default (code 0, or code 1 after an OOM).
    pub exit: Option<ProcessExit>,
}

impl Default for Run {
    fn default() -> Run {
        Run {
            steps: 60,
            first_step: 0,
            step_us: 250_000,
            stages: vec![
                "pre_forward",
                "post_forward",
                "post_backward",
                "post_optimizer_step",
            ],
            parameters_bytes: 4 * GIB,
            grads_bytes: 4 * GIB,
            optimizer_bytes: 8 * GIB,
            activations_bytes: 12 * GIB,
            batch_size: Some(32),
            components: true,
            leak_bytes_per_step: 0,
            eval_every: None,
            eval_marks: 3,
            eval_jump_bytes: 0,
            eval_retained_bytes: 0,
            fragmentation_bytes: 512 * MIB,
            inactive_split_bytes: 64 * MIB,
            alloc_retries_from: None,
            oom_at_step: None,
            oom_requested_bytes: 2 * GIB,
            oom_knows_stage: false,
            gpu_total_bytes: 80 * GIB,
            allocator_stats: true,
            counters: true,
            allocator_counters: false,
            context_bytes: 600 * MIB,
            host_rss_bytes: 6 * GIB,
            host_rss_growth_per_step: 0,
            host_total_bytes: 256 * GIB,
            samples_per_mark: 1,
            exit: None,
        }
    }
}

/// Counters the builder declares.
struct Counters {
    used: CounterId,
    free: CounterId,
    process: CounterId,
    rss: CounterId,
    available: CounterId,
    allocated: Option<CounterId>,
    reserved: Option<CounterId>,
}

/// The allocator state the builder tracks while it writes marks.
#[derive(Default)]
struct State {
    t_us: u64,
    peak_in_step: u64,
    highest_allocated: u64,
    retries: u64,
    ooms: u64,
}

impl Run {
    /// Builds the trace.
    pub fn build(&self) -> Trace {
        let mut trace = Trace {
            format_version: (1, 0),
            metadata: Metadata {
                host: "gpu-node-7".to_owned(),
                pid: 4242,
                command: vec!["python".to_owned(), "train.py".to_owned()],
                sample_interval_us: 1_000,
                gpus: vec![GpuInfo {
                    index: 0,
                    name: "NVIDIA H100 80GB HBM3".to_owned(),
                    total_memory_bytes: self.gpu_total_bytes,
                    ..GpuInfo::default()
                }],
                ..Metadata::default()
            },
            ..Trace::default()
        };
        let counters = self.counters.then(|| Counters {
            used: trace.declare_counter(CounterKind::GpuUsed, Some(0)),
            free: trace.declare_counter(CounterKind::GpuFree, Some(0)),
            process: trace.declare_counter(CounterKind::ProcessGpu, Some(0)),
            rss: trace.declare_counter(CounterKind::HostRss, None),
            available: trace.declare_counter(CounterKind::HostAvailable, None),
            allocated: self.allocator_counters.then(|| {
                trace.declare_counter(
                    CounterKind::Allocator(AllocatorQuantity::Allocated),
                    Some(0),
                )
            }),
            reserved: self.allocator_counters.then(|| {
                trace.declare_counter(CounterKind::Allocator(AllocatorQuantity::Reserved), Some(0))
            }),
        });
        let slot_us = self.step_us / self.stages.len().max(1) as u64;
        let fixed = self.parameters_bytes + self.grads_bytes + self.optimizer_bytes;
        let mut state = State::default();
        let mut retained = 0;
        let mut oomed = false;

        for step in self.first_step..self.first_step + self.steps {
            let base = fixed + self.leak_bytes_per_step * (step - self.first_step) + retained;
            state.peak_in_step = 0;
            for stage in &self.stages {
                let holds_activations = matches!(*stage, "post_forward" | "pre_backward");
                if self.oom_at_step == Some(step) && *stage == "post_forward" {
                    state.t_us += slot_us / 2;
                    state.ooms += 1;
                    self.push_oom(&mut trace, &state, step, base);
                    oomed = true;
                    break;
                }
                let allocated = base
                    + if holds_activations {
                        self.activations_bytes
                    } else {
                        0
                    };
                if self
                    .alloc_retries_from
                    .is_some_and(|(from, _)| step >= from)
                    && holds_activations
                {
                    state.retries += self.alloc_retries_from.map_or(0, |r| r.1);
                }
                state.t_us += slot_us;
                self.push_mark(
                    &mut trace,
                    counters.as_ref(),
                    &mut state,
                    stage,
                    step,
                    Phase::Train,
                    allocated,
                );
            }
            if oomed {
                break;
            }
            if self
                .eval_every
                .is_some_and(|k| (step + 1 - self.first_step).is_multiple_of(k))
            {
                let allocated = base + self.eval_jump_bytes;
                state.peak_in_step = 0;
                for _ in 0..self.eval_marks {
                    state.t_us += slot_us;
                    self.push_mark(
                        &mut trace,
                        counters.as_ref(),
                        &mut state,
                        "eval_forward",
                        step,
                        Phase::Eval,
                        allocated,
                    );
                }
                retained += self.eval_retained_bytes;
            }
        }

        if self.components {
            trace.components.push(ComponentBreakdown {
                t_us: trace.marks.first().map_or(0, |m| m.t_us),
                step: self.first_step,
                batch_size: self.batch_size,
                parameters_bytes: self.parameters_bytes,
                buffers_bytes: 0,
                gradients_bytes: self.grads_bytes,
                optimizer_state_bytes: self.optimizer_bytes,
                extras: Vec::new(),
                optimizers: Vec::new(),
                parameter_count: None,
                trainable_parameter_count: None,
            });
        }
        let end = state.t_us + 1_000;
        trace.exit = Some(self.exit.unwrap_or(ProcessExit {
            t_us: end,
            status: ExitStatus::Code(i32::from(oomed)),
            probable_host_oom: false,
        }));
        trace.end_us = Some(end + 1_000);
        trace
    }

    #[allow(clippy::too_many_arguments)]
    fn push_mark(
        &self,
        trace: &mut Trace,
        counters: Option<&Counters>,
        state: &mut State,
        stage: &str,
        step: u64,
        phase: Phase,
        allocated: u64,
    ) {
        state.peak_in_step = state.peak_in_step.max(allocated);
        state.highest_allocated = state.highest_allocated.max(allocated);
        let reserved = state.highest_allocated + self.fragmentation_bytes;
        if let Some(c) = counters {
            let used = reserved + self.context_bytes;
            let rss =
                self.host_rss_bytes + self.host_rss_growth_per_step * (step - self.first_step);
            let spm = self.samples_per_mark.max(1) as u64;
            let slot_us = self.step_us / self.stages.len().max(1) as u64;
            for j in 0..spm {
                let t = state.t_us - slot_us + (j + 1) * slot_us / spm;
                let mut row = vec![
                    (c.used, used),
                    (c.free, self.gpu_total_bytes.saturating_sub(used)),
                    (c.process, used),
                    (c.rss, rss),
                    (c.available, self.host_total_bytes.saturating_sub(rss)),
                ];
                row.extend(c.allocated.map(|id| (id, allocated)));
                row.extend(c.reserved.map(|id| (id, reserved)));
                trace.samples.push_row(t, &row);
            }
        }
        trace.marks.push(StageMark {
            t_us: state.t_us,
            name: stage.into(),
            step,
            epoch: 0,
            phase,
            allocator: self.allocator_stats.then_some(AllocatorStats {
                allocated_bytes: allocated,
                reserved_bytes: reserved,
                active_bytes: allocated,
                inactive_split_bytes: self.inactive_split_bytes,
                peak_allocated_bytes: state.peak_in_step,
                peak_reserved_bytes: reserved,
                num_alloc_retries: state.retries,
                num_ooms: state.ooms,
            }),
            ..StageMark::default()
        });
    }

    fn push_oom(&self, trace: &mut Trace, state: &State, step: u64, base: u64) {
        let reserved = state.highest_allocated.max(base) + self.fragmentation_bytes;
        let free = self
            .gpu_total_bytes
            .saturating_sub(reserved + self.context_bytes);
        let stage = self.oom_knows_stage.then(|| "post_forward".into());
        trace.ooms.push(OomEvent {
            t_us: state.t_us,
            source: OomSource::Stderr,
            stage,
            step: self.oom_knows_stage.then_some(step),
            requested_bytes: Some(self.oom_requested_bytes),
            device: Some(0),
            device_free_bytes: Some(free),
            device_total_bytes: Some(self.gpu_total_bytes),
            message: "torch.OutOfMemoryError: CUDA out of memory.".to_owned(),
            pid: None,
            rank: None,
            allocated_bytes: None,
            reserved_bytes: None,
        });
    }
}

/// Adds `bytes` to the process's memory on GPU 0 from mark `from_mark` on (its reading at that
/// mark included), the allocator unchanged: memory a library took outside it then.
pub fn add_outside_allocator(trace: &mut Trace, from_mark: usize, bytes: u64) {
    let id = trace
        .counter(CounterKind::ProcessGpu, Some(0))
        .expect("the run records the process's GPU memory");
    let from_us = trace.marks[from_mark].t_us;
    let times = trace.samples.times_us().to_vec();
    trace.samples.edit_column(id, |column| {
        for (v, t) in column.iter_mut().zip(&times) {
            if *t >= from_us {
                *v += bytes;
            }
        }
    });
}

/// Memory kept at each epoch's end: each mark's epoch becomes its step over `steps_per_epoch`,
/// and its allocated and reserved bytes gain `bytes` for each epoch before it (a copy kept at
/// every epoch's end, flat within epochs).
pub fn keep_at_epoch_ends(trace: &mut Trace, steps_per_epoch: u64, bytes: u64) {
    trace.marks.edit(|m| {
        m.epoch = (m.step / steps_per_epoch) as u32;
        if let Some(a) = m.allocator.as_mut() {
            a.allocated_bytes += u64::from(m.epoch) * bytes;
            a.reserved_bytes += u64::from(m.epoch) * bytes;
        }
    });
}
