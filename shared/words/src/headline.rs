//! The two sentences a trace opens with: how the run ended, and its first out-of-memory error.
//!
//! Why a module: the terminal summary and the viewer's overview both lead with them, and they
//! said the same facts in different words ("exit code 1" and "exited with code 1"; the viewer
//! named a probable host OOM kill, the terminal did not). Both print these functions' sentences.

use crate::phrases::kill_sentence;
use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_format::{Attach, AttachEvent, ExitStatus, Trace};

/// How the watched program ended and whether the recording finished cleanly; for a recorder
/// attached to a running process (`collector attach`), when it attached and how its watch ended.
pub fn ending(trace: &Trace) -> String {
    if let Some(attached) = trace.attached() {
        return attached_ending(trace, attached);
    }
    let killed_by_kernel = trace.oom_kills.iter().any(|k| k.main_process);
    let exit = trace.exit.map(|e| match e.status {
        ExitStatus::Code(c) => format!("exited with code {c}"),
        ExitStatus::Signal(s) if killed_by_kernel => {
            format!("killed by signal {s}: the kernel's OOM killer")
        }
        ExitStatus::Signal(s) if e.probable_host_oom => {
            format!("killed by signal {s} (probably the host's OOM killer)")
        }
        ExitStatus::Signal(s) => format!("killed by signal {s}"),
    });
    const CUT: &str = "the recorder crashed or was killed, or the file is cut short";
    match (exit, trace.end_us.is_some()) {
        (Some(exit), true) => format!("{exit}; the trace ended cleanly"),
        (Some(exit), false) => format!("{exit}; the trace did not end cleanly ({CUT})"),
        (None, true) => "still running when the recording stopped".to_owned(),
        (None, false) => {
            format!("the recording ended abruptly ({CUT}): how the program ended is unknown")
        }
    }
}

/// An attached recorder's two facts: how far into its run the process was, and how the watch
/// ended (never an exit status: only the process's parent can read it).
fn attached_ending(trace: &Trace, attached: &Attach) -> String {
    let since = match attached.process_age_us {
        Some(age) => format!(
            "attached to the running process {} after its start",
            format_duration_us(age)
        ),
        None => "attached to the running process".to_owned(),
    };
    let killed_by_kernel = trace.oom_kills.iter().any(|k| k.main_process);
    let end = match (trace.watch_end().map(|e| e.event), trace.end_us.is_some()) {
        _ if killed_by_kernel => "it was killed by the kernel's OOM killer".to_owned(),
        (Some(AttachEvent::ProcessEnded), _) => {
            "it ended (its exit status is its parent's to read, not an attached recorder's)"
                .to_owned()
        }
        (Some(AttachEvent::Detached), _) => "the recording was stopped while it went on".to_owned(),
        (_, true) => "the recording stopped".to_owned(),
        (_, false) => "no end recorded yet: the recording goes on (a trace read while it is \
                       written), or its recorder was killed"
            .to_owned(),
    };
    format!("{since}; {end}")
}

/// The first out-of-memory error in one sentence, when the run had one: what ran out, where in
/// the loop, what was asked for and what was free (and how many more OOMs followed).
pub fn first_oom(trace: &Trace) -> Option<String> {
    if let Some(k) = trace.oom_kills.first() {
        return Some(kill_sentence(k, trace.oom_kills.len() - 1));
    }
    let mut ooms = oomscope_analysis::facts::distinct_ooms(trace);
    let first = ooms.next()?;
    let what = if first.source.is_host() {
        "host"
    } else {
        "GPU"
    };
    let mut text = format!("Out of {what} memory");
    if let Some(step) = first.step {
        text.push_str(&format!(" at step {}", format_count(step)));
    }
    if let Some(stage) = first.stage.as_deref() {
        text.push_str(&format!(" after {stage}"));
    }
    if let Some(requested) = first.requested_bytes {
        text.push_str(&format!(": tried to allocate {}", format_bytes(requested)));
        if let (Some(free), Some(total)) = (first.device_free_bytes, first.device_total_bytes) {
            text.push_str(&format!(
                " with {} free of {}",
                format_bytes(free),
                format_bytes(total)
            ));
        }
    }
    let more = ooms.count();
    if more > 0 {
        text.push_str(&format!(" (and {more} more)"));
    }
    Some(text)
}
