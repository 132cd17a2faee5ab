//! Rules about host memory: near exhaustion, the kernel's OOM killer, workers that copy their
//! parent's memory, and a full `/dev/shm`.

use super::growth::program_of;
use super::rule::{Diagnose, RuleContext, critical_if};
use crate::finding::{
    Detail, Evidence, EvidenceKey as K, FindingKind, HostPressure, Severity, ShmFull,
    WorkersGrowing,
};
use oomscope_format::{OomKind, OomSource, StartMethod};

/// Available host memory below this share of (available + the process's RSS) is pressure: the
/// next DataLoader worker or checkpoint copy can trigger the OOM killer.
pub const HOST_AVAILABLE_MIN_FRACTION: f64 = 0.10;

/// `host-memory-pressure`: host memory nearly ran out, or the process was probably OOM-killed.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostMemoryPressure;

impl Diagnose for HostMemoryPressure {
    const KIND: FindingKind = FindingKind::HostMemoryPressure;
    type Diagnosis = HostPressure;

    /// Detection: the host ran low, or the process was probably OOM-killed; `None` otherwise.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<HostPressure> {
        let ooms = &ctx.analysis.ooms;
        let kill = ooms
            .iter()
            .find(|o| o.kind == OomKind::Host && o.event.source == OomSource::HostKill);
        let failed = ooms.iter().find(|o| {
            o.kind == OomKind::Host
                && !matches!(
                    o.event.source,
                    OomSource::HostKill | OomSource::LauncherKill
                )
        });
        let launcher = ooms
            .iter()
            .find(|o| o.event.source == OomSource::LauncherKill);
        let host = ctx.analysis.host_memory.as_ref();
        let low = host.is_some_and(|h| {
            h.min_available_fraction
                .is_some_and(|f| f < HOST_AVAILABLE_MIN_FRACTION)
        });
        let run_up = ctx
            .analysis
            .run_up
            .as_ref()
            .filter(|r| r.kind == OomKind::Host && (kill.is_some() || failed.is_some()));
        (low || kill.is_some() || failed.is_some() || launcher.is_some()).then(|| HostPressure {
            host: host.cloned(),
            low,
            kill: kill.cloned(),
            failed_impossible: failed.is_some_and(|f| super::impossible::impossible(f).is_some()),
            failed: failed.cloned(),
            launcher: launcher.cloned(),
            run_up: run_up.cloned(),
            workers: program_of(ctx).workers,
        })
    }

    /// Critical when a process was killed or an allocation failed; a warning when memory only
    /// ran low.
    fn severity(&self, d: &HostPressure) -> Severity {
        critical_if(d.kill.is_some() || d.failed.is_some() || d.launcher.is_some())
    }

    fn evidence(&self, d: &HostPressure) -> Vec<Evidence> {
        let mut evidence = Vec::new();
        if let Some(r) = d.failed.as_ref().and_then(|f| f.event.requested_bytes) {
            evidence.push(Evidence::bytes(K::FailedRequestBytes, r as f64));
        }
        if let Some(h) = &d.host {
            evidence.push(Evidence::bytes(
                K::MinAvailableBytes,
                h.min_available_bytes as f64,
            ));
            if let Some(f) = h.min_available_fraction {
                evidence.push(Evidence::share(K::MinAvailableFraction, f));
            }
            if let Some(r) = h.rss_at_min_bytes {
                evidence.push(Evidence::bytes(K::RssAtMinBytes, r as f64));
            }
        }
        evidence.push(Evidence::count(
            K::Killed,
            if d.kill.is_some() { 1.0 } else { 0.0 },
        ));
        if let Some(kill) = d.kill.as_ref().and_then(|k| k.kill.as_ref()) {
            evidence.extend(
                kill.limit_bytes
                    .map(|l| Evidence::bytes(K::LimitBytes, l as f64)),
            );
            evidence.extend(
                kill.rss_bytes
                    .map(|r| Evidence::bytes(K::RssAtKillBytes, r as f64)),
            );
            evidence.push(Evidence::count(K::KilledPid, f64::from(kill.pid)));
        }
        evidence
    }

    fn detail(d: HostPressure) -> Detail {
        Detail::HostMemoryPressure(d)
    }
}

/// `worker-private-growth`: the program's workers each grow private memory: forked ones copy
/// their parent's pages (copy-on-write), spawned or fork-server ones keep things of their own.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerPrivateGrowth;

impl Diagnose for WorkerPrivateGrowth {
    const KIND: FindingKind = FindingKind::WorkerPrivateGrowth;
    type Diagnosis = WorkersGrowing;

    /// Detection: at least one worker whose private memory grows steadily
    /// ([`crate::workers::growing_workers`]); whether what they grow is their own, and how they
    /// were started.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<WorkersGrowing> {
        let workers = &ctx.analysis.growing_workers;
        if workers.is_empty() {
            return None;
        }
        let all = |start| workers.iter().all(|w| w.start == start);
        Some(WorkersGrowing {
            own: crate::workers::grow_their_own(workers),
            start: if all(StartMethod::Fork) {
                StartMethod::Fork
            } else if all(StartMethod::Spawn) {
                StartMethod::Spawn
            } else {
                StartMethod::Forkserver
            },
            workers: workers.clone(),
        })
    }

    fn severity(&self, _: &WorkersGrowing) -> Severity {
        Severity::Warning
    }

    fn evidence(&self, d: &WorkersGrowing) -> Vec<Evidence> {
        let growth: u64 = d
            .workers
            .iter()
            .map(|w| w.last_private_bytes.saturating_sub(w.first_private_bytes))
            .sum();
        let rate: f64 = d.workers.iter().map(|w| w.slope_bytes_per_s).sum();
        vec![
            Evidence::count(K::Workers, d.workers.len() as f64),
            Evidence::bytes(K::PrivateGrowthBytes, growth as f64),
            Evidence::bytes(K::SlopeBytesPerS, rate),
            Evidence::count(K::LargestWorkerPid, f64::from(d.workers[0].pid)),
        ]
    }

    fn detail(d: WorkersGrowing) -> Detail {
        Detail::WorkerPrivateGrowth(d)
    }
}

/// `shm-pressure`: the shared-memory tmpfs (`/dev/shm`) was full ([`crate::shm`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ShmPressure;

impl Diagnose for ShmPressure {
    const KIND: FindingKind = FindingKind::ShmPressure;
    type Diagnosis = ShmFull;

    /// Detection: `/dev/shm` full ([`crate::shm::SharedMemory::full`]: at
    /// [`crate::shm::SHM_FULL_FRACTION`] of its size, or less free than its largest rise), with
    /// the run's own files a part of it (not a tmpfs other processes filled before it).
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<ShmFull> {
        let shm = ctx.analysis.shared_memory.as_ref()?;
        let said = ctx
            .trace
            .notes
            .iter()
            .find(|n| crate::oom_text::shm_failure(&n.text))
            .map(|n| (n.t_us, n.text.clone()));
        // Full by the readings, or by PyTorch's words (a handover that filled it between two
        // readings, a second apart).
        ((shm.full() || said.is_some()) && shm.run_bytes() > 0).then(|| ShmFull {
            shm: *shm,
            failed: ctx
                .trace
                .exit
                .is_some_and(|e| !matches!(e.status, oomscope_format::ExitStatus::Code(0))),
            workers: program_of(ctx).workers,
            said,
        })
    }

    /// Critical when the run then failed.
    fn severity(&self, d: &ShmFull) -> Severity {
        critical_if(d.failed)
    }

    fn evidence(&self, d: &ShmFull) -> Vec<Evidence> {
        vec![
            Evidence::bytes(K::ShmPeakBytes, d.shm.peak_bytes as f64),
            Evidence::bytes(K::ShmSizeBytes, d.shm.size_bytes as f64),
            Evidence::bytes(K::ShmRunBytes, d.shm.run_bytes() as f64),
        ]
    }

    fn detail(d: ShmFull) -> Detail {
        Detail::ShmPressure(d)
    }
}
