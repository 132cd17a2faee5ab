//! The moment a run ran out of memory, with everything the trace knew then.
//!
//! An OOM message says how much was asked for and how much was free; it does not say where in the
//! loop the program was, what was holding the memory, or whether the allocator's cache could have
//! served the request. The trace knows all of that around the event's timestamp, so each OOM (and
//! a probable host OOM kill of the process) becomes an [`OomContext`] that the `oom` finding and
//! the viewer explain from.

use serde::Serialize;

use crate::marks::{StageAt, mark_at_or_before};
use crate::metrics::counter_with_data;
use crate::peaks::{PeakComponents, breakdown_near};
use crate::stages::signed_delta;
use oomscope_format::{
    AliveSite, CounterId, CounterKind, NamedBytes, OomEvent, OomKill, OomKind, OomSource, Phase,
    Trace,
};

/// One out-of-memory event in context: the record with what it left out resolved from the
/// trace, and what the trace knew at that moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomContext {
    /// The OOM record, resolved: its stage is the event's own, else the last mark's at or before
    /// it; its step likewise; free device memory the event's own, else the last sampled
    /// `gpu_free`; total device memory the event's own, else the trace's. (Its fields appear
    /// inline in JSON.)
    #[serde(flatten)]
    pub event: OomEvent,
    /// GPU or host.
    pub kind: OomKind,
    /// Whether the run died of it: the last OOM of a run that then failed (a non-zero exit, a
    /// signal, or no recorded end). An OOM the program survived (it caught it: cuDNN retrying with
    /// a smaller workspace, a batch-size finder, a retry loop) is not fatal: later OOMs followed,
    /// or the program exited with code 0.
    pub fatal: bool,
    /// The stage that followed `stage` the last time the loop passed it: the OOM happened on the
    /// way from `stage` to this one (e.g. `pre_forward` → `post_forward`: in the forward pass).
    pub next_stage: Option<String>,
    /// Phase of the last mark at or before the event.
    pub phase: Option<Phase>,
    /// `requested − free` when both are known; negative when the device had more free memory
    /// than asked for (the request still failed: fragmentation, or another process won the race).
    pub shortfall_bytes: Option<i64>,
    /// The allocator's allocated bytes at the event (the OOM's own record), else at the last mark
    /// at or before it that carried the allocator's statistics.
    pub allocated_bytes: Option<u64>,
    /// The allocator's reserved bytes, read as `allocated_bytes` is.
    pub reserved_bytes: Option<u64>,
    /// Where `allocated_bytes`/`reserved_bytes` come from: `None` when the error itself stated
    /// them (PyTorch's text, or the allocator's OOM observer: the state at the failure), else the
    /// stage of the mark whose statistics gave them (the state some time before the failure).
    pub allocator_mark_stage: Option<String>,
    /// Last sampled device used memory.
    pub gpu_used_bytes: Option<u64>,
    /// Last sampled process GPU memory.
    pub process_gpu_bytes: Option<u64>,
    /// Last sampled host RSS.
    pub host_rss_bytes: Option<u64>,
    /// Last sampled host available memory.
    pub host_available_bytes: Option<u64>,
    /// The largest component of the nearest breakdown.
    pub largest_component: Option<NamedBytes>,
    /// What was alive at the failure, by source line, largest first (`collector run
    /// --oom-snapshot`: the rows the hooks sent right after this OOM; empty without them).
    pub alive: Vec<AliveSite>,
    /// The kernel's own account of a kill by its OOM killer (the cgroup counter, the kernel
    /// log); `None` for every other OOM, including a kill only inferred from a SIGKILL.
    pub kill: Option<OomKill>,
}

/// The caching allocator's allocated and reserved bytes at the failure, when the OOM states them:
/// as numbers on the record (the allocator's observer, format 1.7), else in the error's own words
/// (PyTorch's `Of the allocated memory … is reserved by PyTorch but unallocated`, on stderr and
/// in observer OOMs of older traces).
fn allocator_at_failure(event: &OomEvent) -> Option<(u64, u64)> {
    if let (Some(a), Some(r)) = (event.allocated_bytes, event.reserved_bytes) {
        return Some((a, r));
    }
    let stated = crate::oom_text::recognise(&event.message)?;
    stated.allocated_bytes.zip(stated.reserved_bytes)
}

/// Rows of what was alive that arrive this long after their OOM still belong to it (the hooks
/// send them a moment after the OOM itself, once the memory snapshot is reduced).
pub const ALIVE_WITHIN_US: u64 = 5_000_000;

/// Every OOM event in context, then a probable host OOM kill of the process when the trace has
/// no host-kill event of its own.
pub fn oom_contexts(trace: &Trace) -> Vec<OomContext> {
    // A kill the kernel accounted for replaces the collector's inference from the SIGKILL.
    let inferred_kill =
        |e: &&OomEvent| e.source == OomSource::HostKill && !trace.oom_kills.is_empty();
    let mut out: Vec<OomContext> = distinct_ooms(trace)
        .filter(|e| !inferred_kill(e))
        .map(|event| {
            let mut c = context_at(
                trace,
                event.source.kind(),
                event.source,
                event.t_us,
                event.device,
            );
            if let Some(stage) = &event.stage {
                c.event.stage = Some(stage.clone());
                c.next_stage = next_stage(trace, stage, event.t_us);
            }
            let e = &mut c.event;
            e.step = event.step.or(e.step);
            (e.pid, e.rank) = (event.pid, event.rank);
            e.requested_bytes = event.requested_bytes;
            e.device_free_bytes = event.device_free_bytes.or(e.device_free_bytes);
            e.device_total_bytes = event.device_total_bytes.or(e.device_total_bytes);
            c.shortfall_bytes = e
                .requested_bytes
                .zip(e.device_free_bytes)
                .map(|(r, f)| signed_delta(r, f));
            if let Some((a, r)) = allocator_at_failure(event) {
                c.allocated_bytes = Some(a);
                c.reserved_bytes = Some(r);
                c.allocator_mark_stage = None;
            }
            c.event.message.clone_from(&event.message);
            c
        })
        .collect();
    let failed = trace.failed();
    let last = out.len().checked_sub(1);
    for (i, c) in out.iter_mut().enumerate() {
        c.fatal = failed && Some(i) == last;
    }
    let times: Vec<u64> = out.iter().map(|c| c.event.t_us).collect();
    for (i, c) in out.iter_mut().enumerate() {
        let next = times.get(i + 1).copied().unwrap_or(u64::MAX);
        c.alive = trace
            .alive
            .iter()
            .filter(|a| a.t_us >= c.event.t_us && a.t_us < next)
            .filter(|a| a.t_us - c.event.t_us <= ALIVE_WITHIN_US)
            .cloned()
            .collect();
        // Largest first; the hooks' `<other>` row (the lines beyond the ones sent) last.
        crate::sort::sort_by_key(&mut c.alive, |a| {
            (a.file.as_ref() == "<other>", std::cmp::Reverse(a.bytes))
        });
    }
    // The kernel's own account of its kills, then (only without one) a kill inferred from a
    // SIGKILL near the memory limit.
    for k in &trace.oom_kills {
        let mut c = context_at(trace, OomKind::Host, OomSource::HostKill, k.t_us, None);
        c.fatal = k.main_process || failed;
        c.kill = Some(k.clone());
        out.push(c);
    }
    if trace.oom_kills.is_empty()
        && let Some(exit) = trace.exit
        && exit.probable_host_oom
        && !trace.ooms.iter().any(|o| o.source == OomSource::HostKill)
    {
        let mut c = context_at(trace, OomKind::Host, OomSource::HostKill, exit.t_us, None);
        c.fatal = true;
        out.push(c);
    }
    out
}

/// The trace's OOMs, each told once: of the reports of one OOM ([`OomEvent::same_oom`]: the
/// allocator's observer or the hooks inside the program, then the traceback on stderr, in
/// whichever order they reached the collector) the one that knows the requested size is kept,
/// then the program's own over the stderr text, then the first.
pub fn distinct_ooms(trace: &Trace) -> impl Iterator<Item = &OomEvent> {
    let rank = |o: &OomEvent| (o.requested_bytes.is_some(), o.source != OomSource::Stderr);
    let ooms = &trace.ooms;
    ooms.iter().enumerate().filter_map(move |(i, event)| {
        let better = ooms.iter().enumerate().any(|(j, other)| {
            j != i
                && (other.same_oom(event) || event.same_oom(other))
                && (rank(other) > rank(event) || (rank(other) == rank(event) && j < i))
        });
        (!better).then_some(event)
    })
}

/// What the trace knew at `t_us`, before the event's own fields are applied.
fn context_at(
    trace: &Trace,
    kind: OomKind,
    source: OomSource,
    t_us: u64,
    device: Option<u32>,
) -> OomContext {
    let stage = StageAt::at(trace, t_us);
    let stats_at = mark_at_or_before(trace, t_us).and_then(|last| {
        (0..=last)
            .rev()
            .find_map(|i| Some((&trace.marks[i], trace.marks.allocator(i)?)))
    });
    let (stats_mark, stats) = (stats_at.map(|(m, _)| m), stats_at.map(|(_, s)| s));
    let sampled = |kind: CounterKind, device: Option<u32>| -> Option<u64> {
        let id: CounterId = match device {
            Some(d) => trace.counter(kind, Some(d)),
            None => counter_with_data(trace, kind),
        }?;
        trace.samples.value_at(id, t_us)
    };
    let device_total_bytes = device
        .and_then(|d| trace.gpu_total_bytes(Some(d)))
        .or_else(|| trace.gpu_total_bytes(None));
    let largest_component =
        breakdown_near(trace, t_us).and_then(|b| PeakComponents::new(b, 0, None).largest());
    OomContext {
        event: OomEvent {
            stage: stage.as_ref().map(|s| s.stage.as_str().into()),
            step: stage.as_ref().map(|s| s.step),
            device,
            device_free_bytes: sampled(CounterKind::GpuFree, device),
            device_total_bytes,
            ..OomEvent::new(t_us, source, String::new())
        },
        kind,
        fatal: false,
        next_stage: stage
            .as_ref()
            .and_then(|s| next_stage(trace, &s.stage, t_us)),
        phase: stage.as_ref().map(|s| s.phase),
        shortfall_bytes: None,
        allocated_bytes: stats.map(|s| s.allocated_bytes),
        reserved_bytes: stats.map(|s| s.reserved_bytes),
        allocator_mark_stage: stats_mark.map(|m| m.name.as_ref().to_owned()),
        gpu_used_bytes: sampled(CounterKind::GpuUsed, device),
        process_gpu_bytes: sampled(CounterKind::ProcessGpu, device),
        host_rss_bytes: crate::metrics::host_in_use(trace)
            .and_then(|id| trace.samples.value_at(id, t_us)),
        host_available_bytes: sampled(CounterKind::HostAvailable, None),
        largest_component,
        alive: Vec::new(),
        kill: None,
    }
}

/// The stage of the mark that followed the latest earlier mark named `stage` (before `t_us`, and
/// not the last mark before `t_us` itself, which has no follower yet).
fn next_stage(trace: &Trace, stage: &str, t_us: u64) -> Option<String> {
    let last = mark_at_or_before(trace, t_us)?;
    (0..last)
        .rev()
        .find(|&i| trace.marks[i].name.as_ref() == stage)
        .map(|i| trace.marks[i + 1].name.as_ref().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_format::{ExitStatus, ProcessExit};
    use oomscope_testkit::run::Run;

    #[test]
    fn only_the_last_oom_of_a_failed_run_is_fatal() {
        let run = Run {
            oom_at_step: Some(30),
            oom_requested_bytes: 4 * GIB,
            ..Run::default()
        };
        let mut trace = run.build();
        // A caught OOM earlier (a cuDNN fallback): the program went on.
        let mut caught = trace.ooms[0].clone();
        caught.t_us -= 5_000_000;
        caught.requested_bytes = Some(GIB);
        trace.ooms.insert(0, caught);
        let fatal: Vec<bool> = oom_contexts(&trace).iter().map(|c| c.fatal).collect();
        assert_eq!(fatal, [false, true]);
        // The same OOMs in a run that exited with code 0: all caught.
        trace.exit = Some(ProcessExit {
            status: ExitStatus::Code(0),
            ..trace.exit.unwrap()
        });
        let fatal: Vec<bool> = oom_contexts(&trace).iter().map(|c| c.fatal).collect();
        assert_eq!(fatal, [false, false]);
    }

    #[test]
    fn gpu_oom_in_context() {
        let run = Run {
            oom_at_step: Some(30),
            oom_requested_bytes: 4 * GIB,
            fragmentation_bytes: 512 * MIB,
            ..Run::default()
        };
        let contexts = oom_contexts(&run.build());
        assert_eq!(contexts.len(), 1);
        let c = &contexts[0];
        assert_eq!(c.kind, OomKind::Gpu);
        // The stderr event knows no stage: it comes from the last mark (pre_forward, step 30).
        assert_eq!(c.event.stage.as_deref(), Some("pre_forward"));
        assert_eq!(c.next_stage.as_deref(), Some("post_forward"));
        assert_eq!(c.event.step, Some(30));
        assert_eq!(c.phase, Some(Phase::Train));
        assert_eq!(c.event.requested_bytes, Some(4 * GIB));
        let free = 80 * GIB - (28 * GIB + 512 * MIB + 600 * MIB);
        assert_eq!(c.event.device_free_bytes, Some(free));
        assert_eq!(c.shortfall_bytes, Some(4 * GIB as i64 - free as i64));
        assert_eq!(c.allocated_bytes, Some(16 * GIB));
        assert_eq!(c.reserved_bytes, Some(28 * GIB + 512 * MIB));
        assert_eq!(c.allocator_mark_stage.as_deref(), Some("pre_forward"));
        assert_eq!(c.process_gpu_bytes, Some(28 * GIB + 512 * MIB + 600 * MIB));
        assert_eq!(
            c.largest_component.as_ref().unwrap().name.as_ref(),
            "optimizer_state"
        );
        assert!(c.event.message.contains("CUDA out of memory"));
    }

    #[test]
    fn the_event_s_own_stage_wins() {
        let run = Run {
            oom_at_step: Some(3),
            oom_knows_stage: true,
            ..Run::default()
        };
        let c = &oom_contexts(&run.build())[0];
        assert_eq!(c.event.stage.as_deref(), Some("post_forward"));
        assert_eq!(c.next_stage.as_deref(), Some("post_backward"));
        assert_eq!(c.event.step, Some(3));
    }

    #[test]
    fn the_allocator_state_the_error_states_wins_over_the_last_mark() {
        let run = Run {
            oom_at_step: Some(3),
            ..Run::default()
        };
        let mut trace = run.build();
        // libtorch's wording; on an H100 the forward had allocated 64.73 GiB since the last mark.
        trace.ooms[0].message = "CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 13.73 GiB is free. Of the allocated memory 64.73 GiB is allocated by PyTorch, and 2.00 MiB is reserved by PyTorch but unallocated.".to_owned();
        let c = &oom_contexts(&trace)[0];
        let stated = (64.73 * GIB as f64).round() as u64;
        assert_eq!(c.allocated_bytes, Some(stated));
        assert_eq!(c.reserved_bytes, Some(stated + 2 * MIB));
        assert_eq!(c.allocator_mark_stage, None);
    }

    #[test]
    fn free_memory_from_samples_when_the_event_does_not_say() {
        let run = Run {
            oom_at_step: Some(3),
            ..Run::default()
        };
        let mut trace = run.build();
        trace.ooms[0].device_free_bytes = None;
        trace.ooms[0].device_total_bytes = None;
        let c = &oom_contexts(&trace)[0];
        assert_eq!(
            c.event.device_free_bytes,
            Some(80 * GIB - (28 * GIB + 512 * MIB + 600 * MIB))
        );
        assert_eq!(c.event.device_total_bytes, Some(80 * GIB));
    }

    #[test]
    fn host_oom_kill_becomes_a_context() {
        let run = Run {
            exit: Some(ProcessExit {
                t_us: 10_000_000,
                status: ExitStatus::Signal(9),
                probable_host_oom: true,
            }),
            ..Run::default()
        };
        let contexts = oom_contexts(&run.build());
        assert_eq!(contexts.len(), 1);
        let c = &contexts[0];
        assert_eq!(
            (c.kind, c.event.source),
            (OomKind::Host, OomSource::HostKill)
        );
        assert_eq!(c.host_rss_bytes, Some(6 * GIB));
        assert_eq!(c.host_available_bytes, Some(250 * GIB));
        assert!(c.event.requested_bytes.is_none() && c.shortfall_bytes.is_none());
    }

    #[test]
    fn clean_run_has_no_oom() {
        assert!(oom_contexts(&Run::default().build()).is_empty());
    }
}
