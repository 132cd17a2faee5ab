//! What rose before a run died of memory.
//!
//! An OOM (a CUDA OOM, a kill by the kernel's OOM killer) happens at one allocation, but what
//! filled the memory rose before it. When the run died inside an eval, the eval is the run-up:
//! how much memory it had added batch by batch when it died, and what the hooks counted growing
//! in it (HELD rows on the eval's clock: the list its outputs were appended to). The OOM findings
//! say it and take their advice from it, rather than from a list of usual suspects (DataLoader
//! workers in a program that has none).

use serde::Serialize;

use crate::metrics::MetricKey;
use crate::oom::OomContext;
use crate::phases::PhaseTransition;
use oomscope_format::{HeldClock, HeldKind, HeldTensors, OomKind, Phase, Trace};

/// The eval a run died in, and what it had added when it died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunUp {
    /// Host or GPU: the memory that ran out.
    pub kind: OomKind,
    /// When the OOM was.
    pub oom_t_us: u64,
    /// The step the eval came at (its first mark's).
    pub eval_step: u64,
    /// When the eval began (its first mark).
    pub eval_t_us: u64,
    /// What `growth_bytes` measures (the eval table's metric).
    pub metric: MetricKey,
    /// Whether `metric` is the memory that ran out (host memory for a host OOM, GPU memory for a
    /// CUDA one): only then is `growth_bytes` what filled it.
    pub metric_ran_out: bool,
    /// The eval's batches before the OOM (its marks at the stage its growth is read at).
    pub batches: usize,
    /// The metric at the eval's last batch minus at its first, when the trace ended in the eval
    /// (`None` with fewer than two batches, or when marks came after it: then the batches after
    /// the OOM are in it too).
    pub growth_bytes: Option<i64>,
    /// What the hooks counted growing over the eval's batches, largest first.
    pub held: Vec<HeldTensors>,
    /// Whether the eval's forwards ran with autograd on, when the hooks said.
    pub autograd: Option<bool>,
}

impl RunUp {
    /// What the eval added a batch, over its batches, when it grew.
    pub fn per_batch_bytes(&self) -> Option<u64> {
        let growth = u64::try_from(self.growth_bytes?).ok().filter(|g| *g > 0)?;
        let spans = self.batches.checked_sub(1).filter(|n| *n > 0)?;
        Some(growth / spans as u64)
    }
}

/// The run-up to the run's fatal OOM when it died in an eval; `None` otherwise (an OOM the run
/// survived, one in training: the leak and batch findings tell those).
pub fn run_up(
    trace: &Trace,
    ooms: &[OomContext],
    transitions: &[PhaseTransition],
) -> Option<RunUp> {
    let oom = ooms.iter().find(|o| o.fatal)?;
    if oom.phase != Some(Phase::Eval) {
        return None;
    }
    let t_us = oom.event.t_us;
    let eval = transitions
        .iter()
        .rfind(|e| e.entry_t_us <= t_us && e.exit_t_us.is_none_or(|x| x > t_us))?;
    let mut held: Vec<HeldTensors> = trace
        .held
        .iter()
        .filter(|h| h.clock == HeldClock::Eval && (eval.entry_t_us..=t_us).contains(&h.t_us))
        .cloned()
        .collect();
    crate::sort::sort_by_key(&mut held, |h| std::cmp::Reverse((h.bytes, h.count)));
    let batches = trace
        .marks
        .iter()
        .filter(|m| {
            m.phase == Phase::Eval
                && (eval.entry_t_us..=t_us).contains(&m.t_us)
                && eval.within_stage.as_deref() == Some(&*m.name)
        })
        .count();
    let metric_ran_out = match oom.kind {
        OomKind::Host => eval.metric.is_host(),
        OomKind::Gpu => !eval.metric.is_host(),
    };
    Some(RunUp {
        kind: oom.kind,
        oom_t_us: t_us,
        eval_step: eval.entry_step,
        eval_t_us: eval.entry_t_us,
        metric: eval.metric,
        metric_ran_out,
        batches,
        growth_bytes: eval
            .within_growth_bytes
            .filter(|_| eval.exit_t_us.is_none()),
        held,
        autograd: trace
            .eval_autograd
            .iter()
            .rfind(|a| a.t_us <= t_us)
            .map(|a| a.enabled),
    })
}
/// The largest group the hooks counted growing over an eval's batches that a program's
/// container holds (a list its outputs are appended to).
pub fn eval_holder(held: &[HeldTensors]) -> Option<&HeldTensors> {
    held.iter()
        .filter(|h| {
            h.clock == HeldClock::Eval
                && matches!(h.kind, HeldKind::Tensors | HeldKind::Objects)
                && !h.holder.is_empty()
        })
        .max_by_key(|h| h.bytes)
}
