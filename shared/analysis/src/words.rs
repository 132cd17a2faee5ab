//! Phrases the analysis and the rendering both say: the bottom of the wording, which the
//! analysis may use (a finding quotes a source line, an OOM's message is a kill's sentence) and
//! which imports nothing but the format. Sections, summaries and verdicts live in [`crate::render`],
//! above the analysis, which never imports them.

use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_format::{AliveSite, HeldKind, HeldTensors, OomKill};

/// "The kernel's OOM killer killed python3 (pid 4242, the program) at 3.20 s: memory cgroup
/// limit 400 MiB, 398 MiB resident" (`more`: how many other kills followed).
pub fn kill_sentence(k: &OomKill, more: usize) -> String {
    let mut text = kill_clause(k, more);
    text.replace_range(..1, "T");
    text
}

/// [`kill_sentence`] inside a sentence: "the kernel's OOM killer killed …".
pub fn kill_clause(k: &OomKill, more: usize) -> String {
    let who = match (k.process.is_empty(), k.pid, k.main_process) {
        (_, _, true) if k.process.is_empty() => "the program".to_owned(),
        (false, pid, main) if pid > 0 => format!(
            "{} (pid {pid}, {})",
            k.process,
            if main {
                "the program"
            } else {
                "a process of the program"
            }
        ),
        _ => "a process of the program".to_owned(),
    };
    let mut text = format!(
        "the kernel's OOM killer killed {who} at {}",
        format_duration_us(k.t_us)
    );
    let mut facts = Vec::new();
    if k.global {
        facts.push("the host ran out of memory".to_owned());
    } else if let Some(limit) = k.limit_bytes {
        facts.push(format!("memory cgroup limit {}", format_bytes(limit)));
    }
    if let Some(rss) = k.rss_bytes {
        facts.push(format!("{} resident", format_bytes(rss)));
    }
    if !facts.is_empty() {
        text.push_str(": ");
        text.push_str(&facts.join(", "));
    }
    if more > 0 {
        text.push_str(&format!(" (and {more} more)"));
    }
    text
}

/// `train.py:42 (forward)`: a source line as the terminal and the viewer show it.
pub fn source_line(a: &AliveSite) -> String {
    let file = a.file.rsplit('/').next().unwrap_or(&a.file);
    match (a.line, a.function.as_ref()) {
        (0, _) => file.to_owned(),
        (line, "" | "?") => format!("{file}:{line}"),
        (line, function) => format!("{file}:{line} ({function})"),
    }
}

/// `1 tensor`, `3 tensors`.
pub fn tensor_count(count: u64) -> String {
    if count == 1 {
        "1 tensor".to_owned()
    } else {
        format!("{} tensors", format_count(count))
    }
}

/// `1 mark`, `2 marks`, `12 345 marks`.
pub fn counted(n: u64, thing: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {thing}{s}", format_count(n))
}

/// What holds a group of live tensors, in words: ``list `losses` (96 items)``, "a reference cycle
/// through a `StepRecord` object (attribute `batch`)", "no Python container (held from C++, …)";
/// a graph row's tensor name. Empty when the hooks could not tell.
pub fn holder(h: &HeldTensors) -> String {
    match h.kind {
        HeldKind::Uncontained => {
            "no Python container (held from C++, such as an autograd graph's saved tensors)"
                .to_owned()
        }
        HeldKind::Cycle => format!("a reference cycle through {}", h.holder),
        HeldKind::Graph => h.holder.to_string(),
        HeldKind::Tensors | HeldKind::Objects => match h.items {
            Some(items) if !h.holder.is_empty() => format!("{} ({items} items)", h.holder),
            _ => h.holder.to_string(),
        },
    }
}

/// The transitions a fit crossed, by what they were: "2 evals and 5 pauses between steps"
/// ("eval(s)", never an eval in a program that had none). `unit` is the clock's (`step`,
/// `forward`).
pub fn transitions(fit: &crate::leaks::GrowthFit, unit: &str) -> String {
    let evals = fit.transitions.saturating_sub(fit.pauses + fit.epoch_ends);
    let parts: Vec<String> = [
        (evals, "eval(s)".to_owned()),
        (fit.epoch_ends, "epoch end(s)".to_owned()),
        (fit.pauses, format!("pause(s) between {unit}s")),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", format_count(n as u64)))
    .collect();
    parts.join(" and ")
}
