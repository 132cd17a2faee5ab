//! Phrases many texts say: a kill's sentence, a source line, "3 tensors", what holds a group of
//! tensors, where a peak was, how a process ended. The findings' words, the summary and the
//! live line all build on them, so each thing is said one way.

use oomscope_analysis::facts::FirstFailure;
use oomscope_analysis::facts::GrowthFit;
use oomscope_analysis::facts::OomContext;
use oomscope_analysis::facts::{OutsideMarks, Peak};
use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_format::{AliveSite, ExitStatus, HeldKind, HeldTensors, OomKill, OomSource};

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
pub fn transitions(fit: &GrowthFit, unit: &str) -> String {
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

/// What an OOM said: the error's first words as the program or its launcher said them, a kill's
/// sentence from the kernel's account, or what the collector inferred from a SIGKILL.
pub fn oom_message(c: &OomContext) -> String {
    match &c.kill {
        Some(k) => kill_sentence(k, 0),
        None if c.event.message.is_empty() && c.event.source == OomSource::HostKill => {
            "the process was killed (SIGKILL) while host memory was nearly exhausted".to_owned()
        }
        None => c.event.message.clone(),
    }
}

/// Where a peak was: " at post_forward of step 412", " before the first mark (1.20 s before
/// it)", " after the last mark (222 ms after post_step of step 9)", or empty. Outside the marks
/// no stage was running: setup, loading or a batch search before, teardown or saving after, or
/// code the program does not mark; the words do not guess which.
pub fn peak_place(peak: &Peak) -> String {
    match (&peak.stage, &peak.outside_marks) {
        (Some(s), _) => format!(
            " at {} of step {}{}",
            s.stage,
            format_count(s.step),
            s.phase.suffix()
        ),
        (None, Some(OutsideMarks::BeforeFirstMark { before_us })) => format!(
            " before the first mark ({} before it)",
            format_duration_us(*before_us)
        ),
        (None, Some(OutsideMarks::AfterLastMark { last, after_us })) => format!(
            " after the last mark ({} after {} of step {})",
            format_duration_us(*after_us),
            last.stage,
            format_count(last.step)
        ),
        (None, None) => String::new(),
    }
}

/// `exit code 1`, `SIGKILL`, `signal 40`.
pub fn status_words(status: ExitStatus) -> String {
    match status {
        ExitStatus::Code(code) => format!("exit code {code}"),
        ExitStatus::Signal(signal) => match signal_name(signal) {
            Some(name) => name.to_owned(),
            None => format!("signal {signal}"),
        },
    }
}

/// The name of a common signal.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// What the rank that failed first did: "ran out of host memory after post_forward of step 3",
/// "ended with exit code 1", "failed".
pub fn failure_what(f: &FirstFailure) -> String {
    match (&f.oom, f.exit) {
        (Some(oom), _) => {
            let memory = if oom.host { "host" } else { "device" };
            match (&oom.stage, oom.step) {
                (Some(stage), Some(step)) => {
                    format!("ran out of {memory} memory after {stage} of step {step}")
                }
                (Some(stage), None) => format!("ran out of {memory} memory after {stage}"),
                _ => format!("ran out of {memory} memory"),
            }
        }
        (None, Some(status)) => format!("ended with {}", status_words(status)),
        (None, None) => "failed".to_owned(),
    }
}
