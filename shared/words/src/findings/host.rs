//! The words of the rules about host memory: near exhaustion, the kernel's OOM killer, workers
//! that copy their parent's memory, and a full `/dev/shm`.

use super::finding_text::FindingText;
use super::run_up;
use oomscope_analysis::finding::{HostPressure, ShmFull, WorkersGrowing};
use oomscope_format::StartMethod;
use oomscope_format::units::{
    format_bytes, format_bytes_f64, format_count, format_duration_us, format_percent,
};

use crate::phrases::kill_clause;

/// `host-memory-pressure`: what happened, the change to make.
pub(super) fn host_pressure(d: &HostPressure) -> FindingText {
    let mut facts = Vec::new();
    if let Some(h) = d.host.as_ref().filter(|_| d.low) {
        let total = h.rss_at_min_bytes.map(|r| r + h.min_available_bytes);
        let stage = h.stage.as_ref().map_or_else(String::new, |s| {
            format!(" at {} of step {}", s.stage, format_count(s.step))
        });
        facts.push(format!(
            "host memory available fell to {} ({} of {}){stage} while the process held {} resident",
            format_bytes(h.min_available_bytes),
            format_percent(h.min_available_fraction.unwrap_or(0.0)),
            format_bytes(total.unwrap_or(h.min_available_bytes)),
            format_bytes(h.rss_at_min_bytes.unwrap_or(0)),
        ));
    }
    if let Some(k) = &d.kill
        && let Some(kill) = &k.kill
    {
        let mut fact = kill_clause(kill, 0);
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
    } else if let Some(k) = &d.kill {
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
    if let Some(f) = &d.failed {
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
    if let Some(l) = &d.launcher {
        let whom = l
            .event
            .rank
            .map_or_else(|| "a task".to_owned(), |r| format!("task {r} (rank {r})"));
        facts.push(format!(
            "the launcher killed {whom} for memory at {}: \"{}\" (its memory cgroup's limit, on \
             the node the launcher names)",
            format_duration_us(l.event.t_us),
            l.event.message.lines().next().unwrap_or_default()
        ));
    }
    if let Some(r) = &d.run_up {
        facts.push(run_up::fact(r));
    }
    let exact = d.kill.as_ref().and_then(|k| k.kill.as_ref());
    let title = if let Some(kill) = exact {
        if kill.main_process {
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
        }
    } else if d.kill.is_some() {
        "The process was probably killed for host memory".to_owned()
    } else if d.failed.is_some() {
        "A host allocation failed".to_owned()
    } else if let Some(l) = &d.launcher {
        match l.event.rank {
            Some(r) => format!("Rank {r} was killed by its launcher for memory"),
            None => "A task was killed by its launcher for memory".to_owned(),
        }
    } else {
        "Host memory nearly ran out".to_owned()
    };
    FindingText::new(title, facts.join("; "), host_change(d))
}

/// What to change: a request larger than the host is a shape bug; a launcher's kill, the job's
/// memory request; a kill in an eval, what the eval keeps; else fewer workers or less kept.
fn host_change(d: &HostPressure) -> Vec<String> {
    let exact = d.kill.as_ref().and_then(|k| k.kill.as_ref());
    // One request larger than all the host's memory is a shape or configuration bug (a size
    // taken from the wrong field), not a sign of too many workers or too big a batch.
    if d.failed_impossible {
        return vec![
            "no setting of workers or batch fits one request larger than the host: fix the shape \
             that reaches it (see impossible-request)"
                .to_owned(),
        ];
    }
    if d.launcher.is_some() && exact.is_none() && d.kill.is_none() {
        return vec![
            "the job's memory request is what ran out: raise it (#SBATCH --mem or \
             --mem-per-cpu), or lower the task's host memory: fewer DataLoader workers or a lower \
             prefetch_factor, memory-mapped datasets and checkpoints (torch.load(..., \
             mmap=True)), per-sample Python objects kept out of worker datasets"
                .to_owned(),
        ];
    }
    let limit = exact.is_some_and(|k| !k.global && k.limit_bytes.is_some());
    match d.run_up.as_ref().and_then(run_up::change) {
        Some(mut changes) if limit => {
            changes.push(
                "or raise the memory cgroup's limit (the job's or container's memory request)"
                    .to_owned(),
            );
            changes
        }
        Some(changes) => changes,
        None => {
            let lower = if d.workers {
                "use fewer DataLoader workers or a lower prefetch_factor, memory-map datasets \
                 instead of loading them into RAM, and keep per-sample Python objects out of \
                 worker datasets (copy-on-write duplicates them per worker)"
            } else {
                "look for what the program keeps in host memory (see the other findings: a leak, \
                 an eval that keeps its outputs), memory-map datasets and checkpoints instead of \
                 loading them into RAM (torch.load(..., mmap=True)), and pin less memory"
            };
            vec![if limit {
                format!(
                    "the memory cgroup's limit (the job's or container's memory request) is what \
                     ran out: raise it, or {lower}"
                )
            } else {
                lower.to_owned()
            }]
        }
    }
}

/// What forked workers that copy their parent's pages are told.
const FORKED_ADVICE: [&str; 2] = [
    "keep the dataset out of Python objects the workers read: numpy arrays, torch tensors, \
     Arrow/pandas columns or a memory-mapped file are read without copying",
    "or create the data inside each worker (a DataLoader's worker_init_fn, a Pool's \
     initializer) and use fewer workers",
];

/// `worker-private-growth`.
pub(super) fn workers(d: &WorkersGrowing) -> FindingText {
    let workers = &d.workers;
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
    let rate_per_min = format_bytes_f64(rate * 60.0);
    let largest = format!(
        "the largest, pid {}, went from {} to {} in {}",
        top.pid,
        format_bytes(top.first_private_bytes),
        format_bytes(top.last_private_bytes),
        format_duration_us(top.to_us.saturating_sub(top.from_us)),
    );
    let growing = workers.iter().any(|w| w.still_growing);
    let forked = d.start == StartMethod::Fork;
    let started = match d.start {
        StartMethod::Fork => "fork",
        StartMethod::Spawn => "spawn",
        _ => "a fork server",
    };
    let whose = if forked {
        "each added as much PSS as private memory (a page copied from its parent adds less: it was \
         shared), so it is memory of its own, not copies of its parent's pages"
    } else {
        "each is an interpreter of its own and copied nothing of its parent's (its own start-up, \
         the interpreter and its imports, is not counted)"
    };
    let (title, explanation, changes) = if d.own {
        (
            format!(
                "{} worker process(es) started by {started} grow their own memory ({} private \
                 since {})",
                workers.len(),
                format_bytes(growth),
                if forked {
                    "they started"
                } else {
                    "their first batch"
                }
            ),
            format!(
                "the private memory of {} of the program's processes ({pids}) grew from {} on{}: \
                 {} in all; {largest}. Started by multiprocessing's {started}, {whose}: what \
                 grows is what each worker keeps itself, such as a cache in the dataset object \
                 (one per worker), decoded items, prefetched batches",
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
            vec![
                "bound what the dataset keeps per worker (an LRU of fixed size), or build the \
                 cache once before the DataLoader starts and share it (a memory-mapped file, \
                 shared memory) so the workers hold one copy, not one each"
                    .to_owned(),
                "fewer workers or a lower prefetch_factor hold fewer batches".to_owned(),
            ],
        )
    } else if growing {
        (
            format!(
                "{} worker process(es) copy their parent's memory (+{rate_per_min}/min private)",
                workers.len()
            ),
            format!(
                "the private memory of {} of the program's processes grows steadily ({pids}): \
                 together +{rate_per_min}/min, {} so far; {largest}. A forked worker shares its \
                 parent's pages until it writes to them, and reading Python objects writes their \
                 reference counts, so each worker slowly copies what it reads",
                workers.len(),
                format_bytes(growth),
            ),
            forked_advice(),
        )
    } else {
        (
            format!(
                "{} worker process(es) each copied their parent's memory ({} private in all)",
                workers.len(),
                format_bytes(growth)
            ),
            format!(
                "the private memory of {} of the program's processes ({pids}) rose reading by \
                 reading and then levelled off: {} in all; {largest}. A forked worker shares its \
                 parent's pages until it writes to them, and reading Python objects writes their \
                 reference counts, so each worker ends up with its own copy of what it has read: \
                 the dataset's objects, once per worker (more workers, or a larger dataset, \
                 multiply it)",
                workers.len(),
                format_bytes(growth),
            ),
            forked_advice(),
        )
    };
    FindingText::new(title, explanation, changes)
}

/// [`FORKED_ADVICE`] as a finding's changes.
fn forked_advice() -> Vec<String> {
    FORKED_ADVICE.map(str::to_owned).to_vec()
}

/// The most of PyTorch's words about `/dev/shm` a finding quotes.
const MAX_QUOTED_CHARS: usize = 200;

/// `shm-pressure`.
pub(super) fn shm(d: &ShmFull) -> FindingText {
    let shm = &d.shm;
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
        "the shared-memory tmpfs (/dev/shm) held {} of its {} ({}) at {}, {} of it since the run \
         began; DataLoader workers hand every batch to the main process through it (a file per \
         tensor, in no process's resident memory until mapped), so a batch that does not fit \
         fails in the worker (\"unable to allocate shared memory(shm)\", or a bus error) while \
         the host still has memory, and the loop waits for a batch that never comes",
        format_bytes(shm.peak_bytes),
        format_bytes(shm.size_bytes),
        format_percent(shm.peak_fraction()),
        format_duration_us(shm.peak_t_us),
        format_bytes(shm.run_bytes()),
    );
    if shm.free_at_peak_bytes() < shm.largest_rise_bytes {
        explanation.push_str(&format!(
            "; {} was left free then, less than the most it grew between two readings ({}): the \
             next such handover did not fit",
            format_bytes(shm.free_at_peak_bytes()),
            format_bytes(shm.largest_rise_bytes)
        ));
    }
    if let Some((t_us, text)) = &d.said {
        let text: String = text.chars().take(MAX_QUOTED_CHARS).collect();
        explanation.push_str(&format!(
            "; at {} the program said so: \"{text}\"",
            format_duration_us(*t_us)
        ));
    }
    if d.failed {
        explanation.push_str("; the run then failed");
    }
    let lower = if d.workers {
        "or hand over less at once: fewer DataLoader workers or a lower prefetch_factor (each \
         worker keeps prefetch_factor batches there), smaller batches"
    } else {
        "or keep less there at once: what the program writes to /dev/shm itself (shared tensors, \
         multiprocessing queues)"
    };
    FindingText::new(
        title,
        explanation,
        vec![format!(
            "give the container more shared memory (docker run --shm-size=8g or --ipc=host; \
             Kubernetes: an emptyDir with medium: Memory mounted at /dev/shm), {lower}"
        )],
    )
}
