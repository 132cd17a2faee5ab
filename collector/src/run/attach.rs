//! `collector attach PID`: record a process tree that is already running.
//!
//! Why it differs from `collector run`: the process is not our child. Its memory before the
//! attach is not in the trace, its stderr is not ours to scan, and a process that is not our
//! child cannot be waited for: its exit status belongs to its parent. So the recording starts
//! with an ATTACH record (when, and how long the process had run), watches `/proc/PID` for the
//! process to leave (gone, or a zombie its parent has not reaped yet; its start time guards
//! against a reused pid), and ends with a second ATTACH record in place of an exit: the process
//! ended, or the recorder was stopped (Ctrl-C, SIGTERM, SIGHUP) while the process goes on,
//! untouched. Everything in between (the sampler, the process tree and its GPU memory, the
//! kernel's OOM kills, and with `--socket-file` the marks the process sends) is `collector run`'s.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use oomscope_format::{Attach, AttachEvent, Record};

use super::event::{Ending, Event};
use super::recording::{self, Recording, spawn};
use super::{RunOutcome, oom_kills, sampler};
use crate::gpu::GpuSelection;

/// How often the watch looks for the process's end.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// What `collector attach` was asked to do.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// The process to watch (the root of the tree whose memory is summed).
    pub pid: u32,
    /// Trace file to write.
    pub out: std::path::PathBuf,
    /// Sampling interval.
    pub interval: Duration,
    /// Interval of the process-tree and per-process GPU query.
    pub process_interval: Duration,
    /// GPUs to watch.
    pub gpus: GpuSelection,
    /// Say on stderr what is being recorded, once the process is found.
    pub announce: bool,
    /// Take marks too: bind a marker socket and write its path to this file (what the IPython
    /// extension, inside the process, reads to send its cells' marks and the hooks' messages).
    pub socket_file: Option<std::path::PathBuf>,
}

/// The process as `/proc/PID/stat` says it: its start time (clock ticks after boot) tells it
/// from a later process given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    start_ticks: u64,
    zombie: bool,
}

/// Reads `/proc/PID/stat`: `None` when the process is gone.
fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may hold spaces: fields count from the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is rest's first; field 22 (starttime) its 20th.
    Some(Stat {
        zombie: matches!(fields.first(), Some(&"Z") | Some(&"X")),
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// How long the process has run, from its start time and the time since boot.
fn age(start_ticks: u64) -> Option<Duration> {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let started = start_ticks as f64 / ticks_per_s.max(1) as f64;
    Some(Duration::from_secs_f64((uptime - started).max(0.0)))
}

/// Checks that `pid` is a running process this user may watch: one clear error otherwise.
fn check(pid: u32) -> Result<Stat> {
    if pid == 0 {
        bail!("pid 0 is not a process: give the pid of a running program");
    }
    let Some(stat) = stat(pid).filter(|s| !s.zombie) else {
        bail!("no running process has pid {pid}");
    };
    // Its memory map's totals need the right to read its memory (ptrace's read access): another
    // user's process is refused here rather than recorded as empty.
    if let Err(e) = File::open(format!("/proc/{pid}/smaps_rollup"))
        && e.kind() == std::io::ErrorKind::PermissionDenied
    {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let owner = std::fs::metadata(format!("/proc/{pid}"))
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .ok();
        return Err(refusal(pid, owner, me));
    }
    Ok(stat)
}

/// Why a process whose memory cannot be read is refused: another user's, or ptrace's rules.
fn refusal(pid: u32, owner: Option<u32>, me: u32) -> anyhow::Error {
    match owner {
        Some(uid) if uid != me => anyhow!(
            "cannot attach to pid {pid}: it is user {uid}'s process and this is user {me} (run \
             collector attach as that user, or as root)"
        ),
        _ => anyhow!(
            "cannot attach to pid {pid}: not allowed to read its memory (ptrace access; see \
             /proc/sys/kernel/yama/ptrace_scope)"
        ),
    }
}

/// The signal that asked the recorder to stop (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(signal: libc::c_int) {
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// Ctrl-C, SIGTERM and SIGHUP stop the recording, not the process: it is not ours.
fn install_stop_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(signal, &raw const action, std::ptr::null_mut());
        }
    }
}

/// The process's command line, as `/proc/PID/cmdline` has it.
fn command_of(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Records the running process `options.pid` and its children until it ends or the recorder is
/// stopped. The exit code is 0 (the process's own is its parent's to know).
pub fn attach(options: &AttachOptions) -> Result<RunOutcome> {
    let pid = options.pid;
    let first = check(pid)?;
    let file = File::create(&options.out)
        .with_context(|| format!("cannot write the trace to {}", options.out.display()))?;
    let gpus = super::open_gpus(&options.gpus, &options.out)?;
    install_stop_handlers();
    let socket = match &options.socket_file {
        Some(file) => {
            let socket = super::inbox::MarkerSocket::bind()?;
            // Written whole, then renamed: the reader never sees half a path.
            let partial = file.with_extension("partial");
            std::fs::write(&partial, socket.path().as_os_str().as_encoded_bytes())
                .and_then(|()| std::fs::rename(&partial, file))
                .with_context(|| format!("cannot write the socket's path to {}", file.display()))?;
            Some(socket)
        }
        None => None,
    };
    if options.announce {
        crate::ui::info(&format!(
            "recording pid {pid} into {} until it ends (Ctrl-C stops the recording, not the \
             process)",
            options.out.display()
        ));
    }
    let recording = Recording::start(recording::Source {
        file,
        path: options.out.clone(),
        gpus: gpus.map(Arc::new),
        pid,
        command: command_of(pid),
        interval: options.interval,
        writer: " (attached)",
        socket,
        extra: None,
    })?;
    let state = Arc::clone(recording.state());
    let attached = Attach {
        t_us: state.now_us(),
        event: AttachEvent::Attached,
        process_age_us: age(first.start_ticks)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
    };
    // The first record after the declarations: the recorder's channel is empty yet.
    let _ = recording
        .events()
        .try_send(Event::Records(vec![Record::Attach(attached)]));
    let kill_watch = oom_kills::KillWatch::start(pid, state.now_us());
    let poller = spawn("oomscope-poller", {
        let (state, gpus, interval, events) = (
            Arc::clone(&state),
            recording.gpus().cloned(),
            options.process_interval,
            recording.events().clone(),
        );
        move || sampler::poll_loop(&state, pid, gpus.as_deref(), interval, &events)
    })?;
    let event = loop {
        if STOP_SIGNAL.load(Ordering::SeqCst) != 0 {
            break AttachEvent::Detached;
        }
        match stat(pid) {
            Some(s) if !s.zombie && s.start_ticks == first.start_ticks => {}
            _ => break AttachEvent::ProcessEnded,
        }
        std::thread::sleep(WATCH_EVERY);
    };
    let end_us = state.now_us();
    state.request_stop();
    let _ = poller.join();
    let tree_pids = state
        .seen_pids
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let kills = kill_watch.finish(&oom_kills::RunEnd {
        child_pid: pid,
        tree_pids: &tree_pids,
        status: None,
        t_us: end_us,
        rss_bytes: state.host_rss.current(),
    });
    let trace = recording.finish(
        Ending::Watch(Attach {
            t_us: end_us,
            event,
            process_age_us: None,
        }),
        None,
        kills,
    )?;
    Ok(RunOutcome {
        exit_code: 0,
        trace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_running_and_a_free_pid_as_gone() {
        let me = stat(std::process::id()).unwrap();
        assert!(!me.zombie);
        assert!(age(me.start_ticks).is_some_and(|a| a < Duration::from_secs(24 * 3600)));
        // pid_max is at most 2^22: this pid is never a process.
        assert!(stat(1 << 23).is_none());
        let e = check(1 << 23).unwrap_err().to_string();
        assert_eq!(e, format!("no running process has pid {}", 1 << 23));
    }

    #[test]
    fn another_user_s_process_is_refused_naming_both_users() {
        assert_eq!(
            refusal(7, Some(0), 1000).to_string(),
            "cannot attach to pid 7: it is user 0's process and this is user 1000 (run collector \
             attach as that user, or as root)"
        );
        assert!(
            refusal(7, Some(1000), 1000)
                .to_string()
                .contains("ptrace access")
        );
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_passed_over() {
        let line = "4242 (a (b) c) Z 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                start_ticks: 987654,
                zombie: true
            })
        );
        assert_eq!(parse_stat("4242 (cut"), None);
    }

    #[test]
    fn a_child_killed_and_not_reaped_reads_as_ended() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id();
        let before = stat(pid).unwrap();
        // Between its fork and its exec the child's command line is not yet `sleep`'s.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while command_of(pid) != ["sleep", "5"] && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(command_of(pid), ["sleep", "5"]);
        child.kill().unwrap();
        // Killed and not yet reaped: a zombie, which the watch reads as ended.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !stat(pid).unwrap().zombie && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(stat(pid).unwrap().zombie);
        assert_eq!(stat(pid).unwrap().start_ticks, before.start_ticks);
        child.wait().unwrap();
        assert!(stat(pid).is_none_or(|s| s.start_ticks != before.start_ticks));
    }
}
