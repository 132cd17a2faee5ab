//! The watched child: spawning it, forwarding signals to it, and passing its stderr through
//! while scanning it for out-of-memory errors.
//!
//! Signals: SIGINT and SIGTERM sent to the collector by another process (a job scheduler, `kill`)
//! are forwarded to the child, which then exits and the trace is finalised. A Ctrl-C typed at the
//! terminal is NOT forwarded: the kernel already delivered it to the child, which shares our
//! process group, and a second SIGINT would interrupt the program's own cleanup.

use std::io::{Read, Write};
use std::process::ChildStderr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use super::event::Event;
use super::shared_state::RunState;
use crate::launcher_text::{ChildFailedSummary, SlurmOom, rank_prefix, slurm_oom};
use oomscope_analysis::oom_text::{recognise, recognise_text};
use oomscope_format::Record;

/// Pid of the child, read by the signal handler (0 before it exists).
static CHILD_PID: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the child existed, forwarded once it does (0: none).
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Installs the SIGINT/SIGTERM forwarding handler before the child is spawned, so that a
/// scheduler's SIGTERM in the first milliseconds neither kills the collector (orphaning the
/// child) nor is lost: it is held until [`forward_signals_to`] names the child.
///
/// A signal the collector was started with ignored (a background job of a non-interactive shell
/// ignores SIGINT, `nohup` scripts, some schedulers) stays ignored: a handler would be reset to
/// the default at exec, and the program would die of a signal it ignores without the collector.
pub fn install_signal_forwarding() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only calls async-signal-safe functions (kill) and reads an atomic;
        // the first sigaction only reads the current disposition.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &raw mut current) == 0
                && current.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(signal, &raw const action, std::ptr::null_mut());
        }
    }
}

/// Names the child that signals go to, and hands it any signal that came before it existed.
pub fn forward_signals_to(child_pid: u32) {
    let pid = i32::try_from(child_pid).unwrap_or(0);
    CHILD_PID.store(pid, Ordering::SeqCst);
    let pending = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
    if pending != 0 && pid > 0 {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, pending);
        }
    }
}

extern "C" fn forward(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let code = unsafe { (*info).si_code };
    // SI_USER/SI_QUEUE: sent by a process. Terminal-generated signals come from the kernel and
    // have already reached the child through the process group.
    if code == libc::SI_USER || code == libc::SI_QUEUE {
        let pid = CHILD_PID.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe {
                libc::kill(pid, signal);
            }
        } else {
            PENDING_SIGNAL.store(signal, Ordering::SeqCst);
        }
    }
}

/// Copies the child's stderr to ours unchanged, and sends an event for every line that is an
/// out-of-memory error. Returns at end of file. `terminal` guards our stderr against the status
/// line; `pending_line` tells the status line whether the child left a line unfinished.
pub fn pass_stderr(
    mut stderr: ChildStderr,
    state: &RunState,
    events: &SyncSender<Event>,
    terminal: &Arc<Mutex<super::status::Terminal>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut line = Vec::with_capacity(1024);
    let mut summary = ChildFailedSummary::default();
    let mut slurm_kills = 0usize;
    let mut shm_notes = 0usize;
    loop {
        let n = match stderr.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if let Ok(mut term) = terminal.lock() {
            term.write_child_output(chunk);
        } else {
            let _ = std::io::stderr().write_all(chunk);
        }
        // The complete lines of this read; an error's following lines usually arrive with it
        // (a traceback is written at once) and may state what its first line does not.
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for &byte in chunk {
            if byte == b'\n' {
                lines.push(std::mem::take(&mut line));
            } else if line.len() < 4096 {
                line.push(byte);
            }
        }
        for l in &lines {
            if let Some(mut ends) = summary.feed(&String::from_utf8_lossy(l)) {
                let t_us = state.now_us();
                for end in &mut ends {
                    end.t_us = t_us;
                }
                // The launcher's account of its ranks: rare, sent once; wait for room.
                let records = ends.into_iter().map(Record::ProcessEnd).collect();
                let _ = events.send(Event::Records(records));
            }
            if l.windows(3).any(|w| w == b"Out" || w == b"oom") {
                slurm_line(&String::from_utf8_lossy(l), &mut slurm_kills, state, events);
            }
            if shm_notes < MAX_SHM_NOTES && l.windows(7).any(|w| w == b"/torch_" || w == b"d memor")
            {
                let text = String::from_utf8_lossy(l);
                if oomscope_analysis::oom_text::shm_failure(&text) {
                    shm_notes += 1;
                    let note = oomscope_format::Note {
                        t_us: state.now_us(),
                        text: text.trim().to_owned(),
                    };
                    // Rare and precious (the words that say why the loop hangs): wait for room.
                    let _ = events.send(Event::Records(vec![Record::Note(note)]));
                }
            }
        }
        for i in 0..lines.len() {
            scan_lines(
                &lines[i..lines.len().min(i + 1 + FOLLOWING_LINES)],
                state,
                events,
            );
        }
    }
    if !line.is_empty() {
        scan_lines(&[line], state, events);
    }
}

/// PyTorch's words that `/dev/shm` had no room for a batch (`oom_text::shm_failure`) kept as
/// notes, at most this many a run: each worker of a failing DataLoader may say it.
const MAX_SHM_NOTES: usize = 4;

/// Slurm's word on OOM-killed tasks (`collector run -- srun …`, or a batch step's stderr): each
/// task named is an OOM of source `LauncherKill` (its rank is the task; not this host's
/// figures: it may have run on another node, in a cgroup this collector never saw) and ends as
/// its launcher says, killed (SIGKILL, what the memory cgroup sends); the step's kill count is
/// kept as a note.
fn slurm_line(line: &str, kills: &mut usize, state: &RunState, events: &SyncSender<Event>) {
    let Some(said) = slurm_oom(line) else {
        return;
    };
    let t_us = state.now_us();
    let mut records = Vec::new();
    if let SlurmOom::Tasks { tasks, .. } = said {
        // The first line naming one task names the first failure.
        let first = *kills == 0 && tasks.len() == 1;
        *kills += tasks.len();
        for &task in &tasks {
            let mut oom = oomscope_format::OomEvent::new(
                t_us,
                oomscope_format::OomSource::LauncherKill,
                line.trim().to_owned(),
            );
            oom.rank = Some(task);
            // Through the recorder's OOM path: the rank's pid and stage when it has them.
            let _ = events.send(Event::StderrOom(oom));
        }
        records.extend(tasks.into_iter().map(|task| {
            Record::ProcessEnd(oomscope_format::ProcessEnd {
                t_us,
                rank: Some(task),
                status: Some(oomscope_format::ExitStatus::Signal(9)),
                first_failure: first,
                from_launcher: true,
                ..oomscope_format::ProcessEnd::default()
            })
        }));
    } else {
        records.push(Record::Note(oomscope_format::Note {
            t_us,
            text: line.trim().to_owned(),
        }));
    }
    // Rare and precious: wait for room.
    let _ = events.send(Event::Records(records));
}

/// A line's `[rankN]: ` prefix, read off.
fn rank_prefix_bytes(line: &[u8]) -> (Option<u32>, &[u8]) {
    let text = String::from_utf8_lossy(line);
    match rank_prefix(&text) {
        // The prefix is ASCII: its length is the same in the bytes as in the text.
        (Some(rank), rest) => (Some(rank), &line[text.len() - rest.len()..]),
        (None, _) => (None, line),
    }
}

/// Lines after an OOM line (of the same read) that may complete it (`oom_text::recognise_text`).
const FOLLOWING_LINES: usize = 4;

/// Sends an event when `lines[0]` is an out-of-memory error, completed with facts the lines after
/// it state.
fn scan_lines(lines: &[Vec<u8>], state: &RunState, events: &SyncSender<Event>) {
    let Some(first) = lines.first() else {
        return;
    };
    // A rank's uncaught exception under torch.distributed: `[rank1]: RuntimeError: …`.
    let (rank, first) = rank_prefix_bytes(first);
    // Cheap pre-filter: every recognised message contains "memory" or "alloc" in some case
    // (CUBLAS_STATUS_ALLOC_FAILED, posix_memalign, RESOURCE_EXHAUSTED's "Out of memory").
    let text = String::from_utf8_lossy(first);
    if !(text.contains("memory")
        || text.contains("alloc")
        || text.contains("Memory")
        || text.contains("ALLOC")
        || text.contains("OOM")
        || text.contains("RESOURCE_EXHAUSTED"))
    {
        return;
    }
    if recognise(&text).is_none() {
        return;
    }
    let whole: String = lines
        .iter()
        .map(|l| rank_prefix(&String::from_utf8_lossy(l)).1.to_owned())
        .collect::<Vec<_>>()
        .join("\n");
    if let Some(oom) = recognise_text(&whole) {
        // An OOM is rare and precious: retry a full channel for up to ~50 ms before giving up,
        // but never block the child's stderr for longer.
        let t_us = state.now_us();
        let mut oom = oom.into_event(t_us);
        oom.rank = rank;
        let mut event = Event::StderrOom(oom);
        for _ in 0..50 {
            match events.try_send(event) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(back)) => {
                    event = back;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        state.dropped_messages.fetch_add(1, Ordering::Relaxed);
    }
}
