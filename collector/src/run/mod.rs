//! `collector run -- CMD`: run a program and record its memory.
//!
//! Threads, and why each exists:
//! - the **sampler** reads device and host memory every interval (fast calls only) and, between
//!   ticks, has the [`inbox`] read the marks (the socket's datagrams and the senders' rings),
//!   taking a reading for a mark its sender did not time;
//! - the **poller** refreshes the process tree and per-process GPU memory about once a second
//!   (the slow NVML call that takes the driver's global lock);
//! - the **stderr** thread passes the child's stderr through unchanged and scans it for OOMs;
//! - the **recorder** owns the trace writer; readings and marker messages reach it in time order
//!   through [`shared_state::PendingQueue`], everything else through one bounded channel of
//!   [`event::Event`]s, and it flushes at least twice a second;
//! - the **status** thread redraws the live line on a terminal.
//!
//! The trace file, the recorder and the sampler are a [`Recording`], the same one the tch
//! `Session` starts when a program records itself. The main thread spawns the child, starts the
//! recording and the other threads, waits for the child, then stops the producers and finishes
//! the recording with the child's exit. The collector's exit code is the child's (128 + signal
//! when the child was killed).

pub mod attach;
mod child;
pub(crate) mod event;
pub(crate) mod inbox;
mod oom_kills;
pub mod pane;
pub(crate) mod processes;
mod pss;
pub mod python_hooks;
pub(crate) mod recorder;
pub mod recording;
pub(crate) mod sampler;
pub(crate) mod shared_state;
mod status;

use std::ffi::OsString;
use std::fs::File;
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use oomscope_format::{ExitStatus, OomEvent, OomSource, ProcessExit};

use crate::gpu::{GpuSelection, Gpus};
use oomscope_format::protocol::{PROTOCOL_ENV, PROTOCOL_VERSION, SOCKET_ENV};
pub use recording::Recording;
use recording::spawn;
use shared_state::RunState;

/// A child killed by SIGKILL is a probable host OOM kill when its RSS was at least this share of
/// the host's (or its cgroup's) limit, or available memory was below [`HOST_AVAILABLE_SHARE`].
const HOST_KILL_RSS_SHARE: f64 = 0.9;
/// See [`HOST_KILL_RSS_SHARE`].
const HOST_AVAILABLE_SHARE: f64 = 0.05;

/// What `collector run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Trace file to write.
    pub out: PathBuf,
    /// The file must be new (a path from a template: another rank's file is never overwritten).
    pub exclusive: bool,
    /// Sampling interval.
    pub interval: Duration,
    /// Interval of the process-tree and per-process GPU query.
    pub process_interval: Duration,
    /// GPUs to watch.
    pub gpus: GpuSelection,
    /// No live line, no summary (only the trace path).
    pub quiet: bool,
    /// `collector watch`'s view in a pane under the program's output, or its words in the status
    /// line on a small terminal (`collector run --live`).
    pub live: bool,
    /// Memory limit used to judge a SIGKILL as a host OOM kill (default: cgroup limit, else RAM).
    pub host_limit_bytes: Option<u64>,
    /// Load the zero-code Python hooks into Python children (`python_hooks`).
    pub python_hooks: bool,
    /// With the hooks: record what is alive at an OOM, by source line (`--oom-snapshot`).
    pub oom_snapshot: bool,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

/// What a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// Exit code for the collector: the child's, or 128 + signal.
    pub exit_code: i32,
    /// The trace written.
    pub trace: PathBuf,
}

/// Runs the command under the collector.
pub fn run(options: &RunOptions) -> Result<RunOutcome> {
    let (program, args) = options.command.split_first().ok_or_else(|| {
        anyhow!("no command given: usage is `collector run [OPTIONS] -- CMD [ARGS...]`")
    })?;
    // The trace file first: an unwritable --out must fail before the program starts.
    let file =
        if options.exclusive {
            std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&options.out)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => anyhow!(
                    "will not overwrite {} (another rank's or an earlier run's trace): add {{pid}} \
                     or {{attempt}} to the template, or remove the file",
                    options.out.display()
                ),
                _ => anyhow::Error::new(e)
                    .context(format!("cannot write the trace to {}", options.out.display())),
            })?
        } else {
            File::create(&options.out)
                .with_context(|| format!("cannot write the trace to {}", options.out.display()))?
        };

    let gpus = open_gpus(&options.gpus, &options.out)?;
    let socket = inbox::MarkerSocket::bind()?;

    let mut command = Command::new(program);
    command
        .args(args)
        .env(SOCKET_ENV, socket.path())
        .env(PROTOCOL_ENV, PROTOCOL_VERSION.to_string())
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    if options.python_hooks {
        let boot = python_hooks::write_bootstrap(socket.dir())?;
        command.env(
            "PYTHONPATH",
            python_hooks::python_path(&boot, std::env::var_os("PYTHONPATH")),
        );
        if options.oom_snapshot {
            command.env(python_hooks::OOM_SNAPSHOT_ENV, "1").env(
                python_hooks::OOM_SNAPSHOT_PREFIX_ENV,
                python_hooks::oom_snapshot_prefix(&options.out),
            );
        }
    }
    child::install_signal_forwarding();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_file(&options.out);
            return Err(CannotRun {
                program: program.to_string_lossy().into_owned(),
                source: e,
            }
            .into());
        }
    };
    child::forward_signals_to(child.id());
    let child_pid = child.id();

    let recording = Recording::start(recording::Source {
        file,
        path: options.out.clone(),
        gpus: gpus.map(Arc::new),
        pid: child_pid,
        command: options
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        interval: options.interval,
        writer: "",
        socket: Some(socket),
        extra: None,
    })?;
    let state = Arc::clone(recording.state());
    let kill_watch = oom_kills::KillWatch::start(child_pid, state.now_us());
    let show_status = !options.quiet && std::io::stderr().is_terminal();
    let terminal = Arc::new(Mutex::new(status::Terminal::new(show_status)));
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow!("the child's stderr was not piped"))?;
    let poller = spawn("oomscope-poller", {
        let (state, gpus, interval, events) = (
            Arc::clone(&state),
            recording.gpus().cloned(),
            options.process_interval,
            recording.events().clone(),
        );
        move || sampler::poll_loop(&state, child_pid, gpus.as_deref(), interval, &events)
    })?;
    let (stderr_done, stderr_finished) = sync_channel::<()>(1);
    spawn("oomscope-stderr", {
        let (state, events, terminal) = (
            Arc::clone(&state),
            recording.events().clone(),
            Arc::clone(&terminal),
        );
        move || {
            child::pass_stderr(stderr, &state, &events, &terminal);
            let _ = stderr_done.send(());
        }
    })?;
    let status_thread = show_status
        .then(|| {
            spawn("oomscope-status", {
                let (state, terminal) = (Arc::clone(&state), Arc::clone(&terminal));
                let live = options.live.then(|| options.out.clone());
                move || status::status_loop(&state, &terminal, live)
            })
        })
        .transpose()?;

    let status = child.wait().context("waiting for the program failed")?;
    let exit_t_us = state.now_us();
    // A grandchild may keep stderr open after the child exits: wait briefly, not forever.
    let _ = stderr_finished.recv_timeout(Duration::from_secs(2));
    state.request_stop();
    for thread in [poller].into_iter().chain(status_thread) {
        let _ = thread.join();
    }

    let exit_status = match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(signal)) => ExitStatus::Signal(signal),
        (None, None) => ExitStatus::Code(-1),
    };
    let limit = options
        .host_limit_bytes
        .or_else(|| kill_watch.limit_bytes());
    let tree_pids = state
        .seen_pids
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let kills = kill_watch.finish(&oom_kills::RunEnd {
        child_pid,
        tree_pids: &tree_pids,
        status: Some(exit_status),
        t_us: exit_t_us,
        rss_bytes: state.host_rss.current(),
    });
    let host_kill = if kills.iter().any(|k| k.main_process) {
        None
    } else {
        judge_host_kill(&state, exit_status, limit, exit_t_us)
    };
    let exit = ProcessExit {
        t_us: exit_t_us,
        status: exit_status,
        probable_host_oom: host_kill.is_some() || kills.iter().any(|k| k.main_process),
    };
    let trace = recording.finish(event::Ending::Exited(exit), host_kill, kills)?;

    let exit_code = match exit_status {
        ExitStatus::Code(code) => code,
        ExitStatus::Signal(signal) => 128 + signal,
    };
    Ok(RunOutcome { exit_code, trace })
}

/// The GPUs to watch: with `all` and no NVML, a warning and host memory only; a named GPU that
/// cannot be opened is an error, and the trace file already made is removed.
pub(crate) fn open_gpus(selection: &GpuSelection, out: &std::path::Path) -> Result<Option<Gpus>> {
    match Gpus::open(selection) {
        Ok(gpus) => Ok(Some(gpus)),
        Err(e) if *selection == GpuSelection::All => {
            crate::ui::warning(&format!(
                "{e} ({}); recording host memory only",
                e.root_cause()
            ));
            Ok(None)
        }
        Err(e) => {
            let _ = std::fs::remove_file(out);
            Err(e)
        }
    }
}

/// The program could not be started. Exits like a shell would: 127 when it does not exist,
/// 126 when it cannot be executed.
#[derive(Debug, thiserror::Error)]
#[error("cannot run `{program}`")]
pub struct CannotRun {
    /// The program as given.
    pub program: String,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

impl CannotRun {
    /// The exit code a shell uses for this failure.
    pub fn exit_code(&self) -> u8 {
        match self.source.kind() {
            std::io::ErrorKind::NotFound => 127,
            _ => 126,
        }
    }
}

/// A SIGKILL while the tree's RSS was near the memory limit, or the host nearly out of memory, is
/// probably the kernel's OOM killer.
fn judge_host_kill(
    state: &RunState,
    status: ExitStatus,
    limit_override: Option<u64>,
    t_us: u64,
) -> Option<OomEvent> {
    if status != ExitStatus::Signal(libc::SIGKILL) {
        return None;
    }
    let total = state.host_total_bytes.load(Ordering::Relaxed);
    let limit = limit_override
        .unwrap_or(total)
        .min(if total > 0 { total } else { u64::MAX });
    let rss = state.host_rss.current()?;
    let rss_near_limit = limit > 0 && rss as f64 >= HOST_KILL_RSS_SHARE * limit as f64;
    let host_exhausted = total > 0
        && state
            .host_available
            .current()
            .is_some_and(|a| (a as f64) < HOST_AVAILABLE_SHARE * total as f64);
    (rss_near_limit || host_exhausted).then(|| {
        let message = format!(
            "killed by SIGKILL with {} MiB resident of a {} MiB limit",
            rss >> 20,
            limit >> 20
        );
        OomEvent::new(t_us, OomSource::HostKill, message)
    })
}
