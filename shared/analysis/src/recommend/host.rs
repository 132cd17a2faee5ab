//! Rule about host memory: near exhaustion, or the kernel's OOM killer.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::host::HostMemory;
use crate::oom::OomContext;
use crate::run_up::RunUp;
use oomscope_format::OomKind;
use oomscope_format::units::{format_bytes, format_count, format_duration_us, format_percent};
use oomscope_format::{OomSource, StartMethod};

/// Available host memory below this share of (available + the process's RSS) is pressure: the
/// next DataLoader worker or checkpoint copy can trigger the OOM killer.
pub const HOST_AVAILABLE_MIN_FRACTION: f64 = 0.10;

/// `host-memory-pressure`: host memory nearly ran out, or the process was probably OOM-killed.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostMemoryPressure;

/// What [`HostMemoryPressure`] detected.
#[derive(Debug, Clone, Copy)]
pub struct HostPressure<'a> {
    /// The host's tightest moment (also when it was not tight: the evidence quotes it).
    pub host: Option<&'a HostMemory>,
    /// Whether available memory fell below [`HOST_AVAILABLE_MIN_FRACTION`] then.
    pub low: bool,
    /// The probable kill by the kernel's OOM killer.
    pub kill: Option<&'a OomContext>,
    /// A host allocation the program saw fail (libtorch's `DefaultCPUAllocator`, `MemoryError`):
    /// the process was not killed, it raised.
    pub failed: Option<&'a OomContext>,
    /// A launcher's word that it killed a task for memory (Slurm's `task N: Out Of Memory`): the
    /// task's cgroup, perhaps on another node, so this host's figures say nothing about it.
    pub launcher: Option<&'a OomContext>,
    /// The eval the process died in, and what it had added (a kill or failure in an eval).
    pub run_up: Option<&'a RunUp>,
    /// Whether the program had processes besides itself (DataLoader workers): advice about
    /// workers only then.
    pub workers: bool,
}

impl Diagnose for HostMemoryPressure {
    const KIND: FindingKind = FindingKind::HostMemoryPressure;
    type Diagnosis<'a> = HostPressure<'a>;

    /// Detection: the host ran low, or the process was probably OOM-killed; `None` otherwise.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let kill = ctx
            .analysis
            .ooms
            .iter()
            .find(|o| o.kind == OomKind::Host && o.event.source == OomSource::HostKill);
        let failed = ctx.analysis.ooms.iter().find(|o| {
            o.kind == OomKind::Host
                && !matches!(
                    o.event.source,
                    OomSource::HostKill | OomSource::LauncherKill
                )
        });
        let launcher = ctx
            .analysis
            .ooms
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
        (low || kill.is_some() || failed.is_some() || launcher.is_some()).then_some(HostPressure {
            host,
            low,
            kill,
            failed,
            launcher,
            run_up,
            workers: super::growth::Program::of(ctx).workers,
        })
    }

    /// Wording: what happened, the change to make, and the numbers.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let mut facts = Vec::new();
        if let Some(h) = d.host.filter(|_| d.low) {
            let total = h.rss_at_min_bytes.map(|r| r + h.min_available_bytes);
            let stage = h.stage.as_ref().map_or_else(String::new, |s| {
                format!(" at {} of step {}", s.stage, format_count(s.step))
            });
            facts.push(format!(
                "host memory available fell to {} ({} of {}){stage} while the process held {} \
                 resident",
                format_bytes(h.min_available_bytes),
                format_percent(h.min_available_fraction.unwrap_or(0.0)),
                format_bytes(total.unwrap_or(h.min_available_bytes)),
                format_bytes(h.rss_at_min_bytes.unwrap_or(0)),
            ));
        }
        if let Some(k) = d.kill
            && let Some(kill) = &k.kill
        {
            let mut fact = crate::words::kill_clause(kill, 0);
            if let Some(step) = k.event.step {
                fact.push_str(&format!(" (step {})", format_count(step)));
            }
            let said = match (kill.from_kernel_log, kill.from_cgroup_counter) {
                (true, true) => "the kernel log and the memory cgroup's oom_kill counter say so",
                (true, false) => "the kernel log says so",
                _ => "the memory cgroup's oom_kill counter says so",
            };
            fact.push_str(&format!(" ({said})"));
            facts.push(fact);
        } else if let Some(k) = d.kill {
            let mut fact = format!(
                "the process was killed with SIGKILL at {}",
                format_duration_us(k.event.t_us)
            );
            if let Some(step) = k.event.step {
                fact.push_str(&format!(" (step {})", format_count(step)));
            }
            if let Some(a) = k.host_available_bytes {
                fact.push_str(&format!(" with {} available", format_bytes(a)));
            }
            fact.push_str(": probably the kernel's OOM killer");
            facts.push(fact);
        }
        if let Some(f) = d.failed {
            let mut fact = match f.event.requested_bytes {
                Some(r) => format!("allocating {} failed", format_bytes(r)),
                None => "a host allocation failed".to_owned(),
            };
            fact.push_str(&format!(" at {}", format_duration_us(f.event.t_us)));
            if let Some(step) = f.event.step {
                fact.push_str(&format!(" (step {})", format_count(step)));
            }
            if let Some(a) = f.host_available_bytes {
                fact.push_str(&format!(" with {} available", format_bytes(a)));
            }
            facts.push(fact);
        }
        if let Some(l) = d.launcher {
            let whom = l
                .event
                .rank
                .map_or_else(|| "a task".to_owned(), |r| format!("task {r} (rank {r})"));
            facts.push(format!(
                "the launcher killed {whom} for memory at {}: \"{}\" (its memory cgroup's limit, \
                 on the node the launcher names)",
                format_duration_us(l.event.t_us),
                l.event.message.lines().next().unwrap_or_default()
            ));
        }
        if let Some(r) = d.run_up {
            facts.push(super::run_up::fact(r));
        }
        let mut evidence = Vec::new();
        if let Some(r) = d.failed.and_then(|f| f.event.requested_bytes) {
            evidence.push(Evidence::bytes("failed_request_bytes", r as f64));
        }
        if let Some(h) = d.host {
            evidence.push(Evidence::bytes(
                "min_available_bytes",
                h.min_available_bytes as f64,
            ));
            if let Some(f) = h.min_available_fraction {
                evidence.push(Evidence::share("min_available_fraction", f));
            }
            if let Some(r) = h.rss_at_min_bytes {
                evidence.push(Evidence::bytes("rss_at_min_bytes", r as f64));
            }
        }
        evidence.push(Evidence::count(
            "killed",
            if d.kill.is_some() { 1.0 } else { 0.0 },
        ));
        if let Some(kill) = d.kill.and_then(|k| k.kill.as_ref()) {
            evidence.extend(
                kill.limit_bytes
                    .map(|l| Evidence::bytes("limit_bytes", l as f64)),
            );
            evidence.extend(
                kill.rss_bytes
                    .map(|r| Evidence::bytes("rss_at_kill_bytes", r as f64)),
            );
            evidence.push(Evidence::count("killed_pid", f64::from(kill.pid)));
        }
        let exact = d.kill.and_then(|k| k.kill.as_ref());
        let (severity, title) = if let Some(kill) = exact {
            let whom = if kill.main_process {
                "The program was killed by the kernel's OOM killer".to_owned()
            } else {
                format!(
                    "A process of the program{} was killed by the kernel's OOM killer",
                    if kill.process.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", kill.process)
                    }
                )
            };
            (Severity::Critical, whom)
        } else if d.kill.is_some() {
            (
                Severity::Critical,
                "The process was probably killed for host memory".to_owned(),
            )
        } else if d.failed.is_some() {
            (Severity::Critical, "A host allocation failed".to_owned())
        } else if let Some(l) = d.launcher {
            (
                Severity::Critical,
                match l.event.rank {
                    Some(r) => format!("Rank {r} was killed by its launcher for memory"),
                    None => "A task was killed by its launcher for memory".to_owned(),
                },
            )
        } else {
            (Severity::Warning, "Host memory nearly ran out".to_owned())
        };
        // One request larger than all the host's memory is a shape or configuration bug (a size
        // taken from the wrong field), not a sign of too many workers or too big a batch.
        let advice = match d.failed.and_then(super::impossible::impossible) {
            Some(_) => "no setting of workers or batch fits one request larger than the host: fix \
                        the shape that reaches it (see impossible-request)"
                .to_owned(),
            None if d.launcher.is_some() && exact.is_none() && d.kill.is_none() => {
                "the job's memory request is what ran out: raise it (#SBATCH --mem or \
                 --mem-per-cpu), or lower the task's host memory: fewer DataLoader workers or a \
                 lower prefetch_factor, memory-mapped datasets and checkpoints \
                 (torch.load(..., mmap=True)), per-sample Python objects kept out of worker \
                 datasets"
                    .to_owned()
            }
            None => {
                let limit = exact.is_some_and(|k| !k.global && k.limit_bytes.is_some());
                match d.run_up.and_then(super::run_up::change) {
                    Some(change) if limit => format!(
                        "{change}; or raise the memory cgroup's limit (the job's or container's \
                         memory request)"
                    ),
                    Some(change) => change,
                    None => {
                        let lower = if d.workers {
                            "use fewer DataLoader workers or a lower prefetch_factor, memory-map \
                             datasets instead of loading them into RAM, and keep per-sample \
                             Python objects out of worker datasets (copy-on-write duplicates \
                             them per worker)"
                        } else {
                            "look for what the program keeps in host memory (see the other \
                             findings: a leak, an eval that keeps its outputs), memory-map \
                             datasets and checkpoints instead of loading them into RAM \
                             (torch.load(..., mmap=True)), and pin less memory"
                        };
                        if limit {
                            format!(
                                "the memory cgroup's limit (the job's or container's memory \
                                 request) is what ran out: raise it, or {lower}"
                            )
                        } else {
                            lower.to_owned()
                        }
                    }
                }
            }
        };
        finding(self, severity, title, facts.join("; "), advice, evidence)
    }
}

/// What forked workers that copy their parent's pages are told.
const FORKED_ADVICE: &str = "keep the dataset out of Python objects the workers read: numpy \
    arrays, torch tensors, Arrow/pandas columns or a memory-mapped file are read without \
    copying; or create the data inside each worker (worker_init_fn) and use fewer workers";

/// `worker-private-growth`: the program's workers each grow private memory: forked ones copy
/// their parent's pages (copy-on-write), spawned or fork-server ones keep things of their own.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerPrivateGrowth;

impl Diagnose for WorkerPrivateGrowth {
    const KIND: FindingKind = FindingKind::WorkerPrivateGrowth;
    type Diagnosis<'a> = &'a [crate::workers::WorkerGrowth];

    /// Detection: at least one worker whose private memory grows steadily
    /// ([`crate::workers::growing_workers`]).
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let workers = ctx.analysis.growing_workers.as_slice();
        (!workers.is_empty()).then_some(workers)
    }

    /// Wording.
    fn explain(&self, workers: &Self::Diagnosis<'_>) -> Finding {
        let shown: Vec<String> = workers.iter().take(8).map(|w| w.pid.to_string()).collect();
        let more = workers.len().saturating_sub(shown.len());
        let rate: f64 = workers.iter().map(|w| w.slope_bytes_per_s).sum();
        let growth: u64 = workers
            .iter()
            .map(|w| w.last_private_bytes.saturating_sub(w.first_private_bytes))
            .sum();
        let top = &workers[0];
        let pids = format!(
            "{}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
        let rate_per_min = oomscope_format::units::format_bytes_f64(rate * 60.0);
        let largest = format!(
            "the largest, pid {}, went from {} to {} in {}",
            top.pid,
            format_bytes(top.first_private_bytes),
            format_bytes(top.last_private_bytes),
            format_duration_us(top.to_us.saturating_sub(top.from_us)),
        );
        let growing = workers.iter().any(|w| w.still_growing);
        // Spawned or fork-server workers copy nothing of their parent's: their growth is what
        // each keeps itself.
        // So do a few forked workers whose PSS rose as much as their private memory: memory of
        // their own, not copies of their parent's pages.
        let own = crate::workers::grow_their_own(workers);
        let forked = workers.iter().all(|w| w.start == StartMethod::Fork);
        let started = if forked {
            "fork"
        } else if workers.iter().all(|w| w.start == StartMethod::Spawn) {
            "spawn"
        } else {
            "a fork server"
        };
        let whose = if forked {
            "each added as much PSS as private memory (a page copied from its parent adds less: \
             it was shared), so it is memory of its own, not copies of its parent's pages"
        } else {
            "each is an interpreter of its own and copied nothing of its parent's (its own \
             start-up, the interpreter and its imports, is not counted)"
        };
        let (title, explanation, advice) = if own {
            (
                format!(
                    "{} worker process(es) started by {started} grow their own memory ({} \
                     private since {})",
                    workers.len(),
                    format_bytes(growth),
                    if forked {
                        "they started"
                    } else {
                        "their first batch"
                    }
                ),
                format!(
                    "the private memory of {} of the program's processes ({pids}) grew from {} \
                     on{}: {} in all; {largest}. Started by \
                     multiprocessing's {started}, {whose}: what grows is what each worker keeps \
                     itself, such as a cache in the dataset object (one per worker), decoded \
                     items, prefetched batches",
                    workers.len(),
                    if forked {
                        "their start"
                    } else {
                        "the program's first batch"
                    },
                    if growing {
                        format!(" and still grows (+{rate_per_min}/min together)")
                    } else {
                        " and levelled off".to_owned()
                    },
                    format_bytes(growth),
                ),
                "bound what the dataset keeps per worker (an LRU of fixed size), or build the \
                 cache once before the DataLoader starts and share it (a memory-mapped file, \
                 shared memory) so the workers hold one copy, not one each; fewer workers or a \
                 lower prefetch_factor hold fewer batches"
                    .to_owned(),
            )
        } else if growing {
            (
                format!(
                    "{} worker process(es) copy their parent's memory (+{rate_per_min}/min \
                     private)",
                    workers.len()
                ),
                format!(
                    "the private memory of {} of the program's processes grows steadily \
                     ({pids}): together +{rate_per_min}/min, {} so far; {largest}. A forked \
                     worker shares its parent's pages until it writes to them, and reading \
                     Python objects writes their reference counts, so each worker slowly copies \
                     what it reads",
                    workers.len(),
                    format_bytes(growth),
                ),
                FORKED_ADVICE.to_owned(),
            )
        } else {
            (
                format!(
                    "{} worker process(es) each copied their parent's memory ({} private in all)",
                    workers.len(),
                    format_bytes(growth)
                ),
                format!(
                    "the private memory of {} of the program's processes ({pids}) rose reading \
                     by reading and then levelled off: {} in all; {largest}. A forked worker \
                     shares its parent's pages until it writes to them, and reading Python \
                     objects writes their reference counts, so each worker ends up with its own \
                     copy of what it has read: the dataset's objects, once per worker (more \
                     workers, or a larger dataset, multiply it)",
                    workers.len(),
                    format_bytes(growth),
                ),
                FORKED_ADVICE.to_owned(),
            )
        };
        finding(
            self,
            Severity::Warning,
            title,
            explanation,
            advice,
            vec![
                Evidence::count("workers", workers.len() as f64),
                Evidence::bytes("private_growth_bytes", growth as f64),
                Evidence::bytes("slope_bytes_per_s", rate),
                Evidence::count("largest_worker_pid", f64::from(top.pid)),
            ],
        )
    }
}

/// `shm-pressure`: the shared-memory tmpfs (`/dev/shm`) was full ([`crate::shm`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ShmPressure;

/// The most of PyTorch's words about `/dev/shm` a finding quotes.
const MAX_QUOTED_CHARS: usize = 200;

/// What [`ShmPressure`] detected.
#[derive(Debug, Clone, Copy)]
pub struct ShmFull<'a> {
    /// `/dev/shm` over the run.
    pub shm: &'a crate::shm::SharedMemory,
    /// Whether the run failed (a non-zero exit, a signal).
    pub failed: bool,
    /// Whether the program had processes besides itself (DataLoader workers).
    pub workers: bool,
    /// PyTorch's first words that `/dev/shm` had no room (a note the collector kept from the
    /// program's stderr, `oom_text::shm_failure`), and when.
    pub said: Option<(u64, &'a str)>,
}

impl Diagnose for ShmPressure {
    const KIND: FindingKind = FindingKind::ShmPressure;
    type Diagnosis<'a> = ShmFull<'a>;

    /// Detection: `/dev/shm` full ([`crate::shm::SharedMemory::full`]: at
    /// [`crate::shm::SHM_FULL_FRACTION`] of its size, or less free than its largest rise), with
    /// the run's own files a part of it (not a tmpfs other processes filled before it).
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let shm = ctx.analysis.shared_memory.as_ref()?;
        let said = ctx
            .trace
            .notes
            .iter()
            .find(|n| crate::oom_text::shm_failure(&n.text))
            .map(|n| (n.t_us, n.text.as_str()));
        // Full by the readings, or by PyTorch's words (a handover that filled it between two
        // readings, a second apart).
        ((shm.full() || said.is_some()) && shm.run_bytes() > 0).then(|| ShmFull {
            shm,
            failed: ctx
                .trace
                .exit
                .is_some_and(|e| !matches!(e.status, oomscope_format::ExitStatus::Code(0))),
            workers: super::growth::Program::of(ctx).workers,
            said,
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let shm = d.shm;
        let (ran_out, at) = match shm.full() {
            true => ("was full", ""),
            false => ("ran out, PyTorch said", " at the most read"),
        };
        let title = format!(
            "/dev/shm {ran_out}: {} of its {}{at}",
            format_bytes(shm.peak_bytes),
            format_bytes(shm.size_bytes)
        );
        let mut explanation = format!(
            "the shared-memory tmpfs (/dev/shm) held {} of its {} ({}) at {}, {} of it since the \
             run began; DataLoader workers hand every batch to the main process through it (a \
             file per tensor, in no process's resident memory until mapped), so a batch that \
             does not fit fails in the worker (\"unable to allocate shared memory(shm)\", or a \
             bus error) while the host still has memory, and the loop waits for a batch that \
             never comes",
            format_bytes(shm.peak_bytes),
            format_bytes(shm.size_bytes),
            format_percent(shm.peak_fraction()),
            format_duration_us(shm.peak_t_us),
            format_bytes(shm.run_bytes()),
        );
        if shm.free_at_peak_bytes() < shm.largest_rise_bytes {
            explanation.push_str(&format!(
                "; {} was left free then, less than the most it grew between two readings ({}): \
                 the next such handover did not fit",
                format_bytes(shm.free_at_peak_bytes()),
                format_bytes(shm.largest_rise_bytes)
            ));
        }
        if let Some((t_us, text)) = d.said {
            let text: String = text.chars().take(MAX_QUOTED_CHARS).collect();
            explanation.push_str(&format!(
                "; at {} the program said so: \"{text}\"",
                format_duration_us(t_us)
            ));
        }
        if d.failed {
            explanation.push_str("; the run then failed");
        }
        let lower = if d.workers {
            "or hand over less at once: fewer DataLoader workers or a lower prefetch_factor (each \
             worker keeps prefetch_factor batches there), smaller batches"
        } else {
            "or keep less there at once: what the program writes to /dev/shm itself (shared \
             tensors, multiprocessing queues)"
        };
        finding(
            self,
            if d.failed {
                Severity::Critical
            } else {
                Severity::Warning
            },
            title,
            explanation,
            format!(
                "give the container more shared memory (docker run --shm-size=8g or --ipc=host; \
                 Kubernetes: an emptyDir with medium: Memory mounted at /dev/shm), {lower}"
            ),
            vec![
                Evidence::bytes("shm_peak_bytes", shm.peak_bytes as f64),
                Evidence::bytes("shm_size_bytes", shm.size_bytes as f64),
                Evidence::bytes("shm_run_bytes", shm.run_bytes() as f64),
            ],
        )
    }
}
