//! `Probe`: the Rust client of the marker protocol.
//!
//! ```no_run
//! use oomscope_collector::probe::Probe;
//!
//! let probe = Probe::from_env(); // disabled (every call a no-op) outside `collector run`
//! for step in 0..100 {
//!     probe.step(step);
//!     probe.mark("pre_forward");
//!     // forward...
//!     probe.mark("post_forward");
//! }
//! ```
//!
//! Sends are non-blocking: when the collector cannot keep up, the kernel refuses the datagram and
//! the probe counts it in [`Probe::dropped`] instead of waiting. When `OOMSCOPE_SOCKET` is not
//! set, every method returns after one branch.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU64, Ordering};

use oomscope_format::{AllocatorStats, Note, Phase, Record, StageMark};

use oomscope_format::protocol::{
    self, Context, Message, PROTOCOL_ENV, PROTOCOL_VERSION, SOCKET_ENV,
};

/// A connection to the collector watching this process (or none).
#[derive(Debug)]
pub struct Probe {
    socket: Option<UnixDatagram>,
    dropped: AtomicU64,
    /// This process's rank (`RANK`, set by torchrun, `srun` wrappers and the Kubernetes
    /// operators), sent on every mark with the pid: several processes can share one collector.
    rank: Option<u32>,
}

/// The distributed rank of this process, from `RANK` (`None` when unset or not a number).
pub fn rank_from_env() -> Option<u32> {
    env_u32("RANK")
}

/// A number from the environment (`RANK`, `WORLD_SIZE`); `None` when unset or not a number.
pub fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok()?.trim().parse().ok()
}

impl Probe {
    /// Connects to the collector named by `OOMSCOPE_SOCKET`; disabled when the variable is unset,
    /// the collector speaks another protocol version, or the socket cannot be reached.
    pub fn from_env() -> Probe {
        let Some(path) = std::env::var_os(SOCKET_ENV) else {
            return Probe::disabled();
        };
        let version_ok = std::env::var(PROTOCOL_ENV)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .is_none_or(|v| v == PROTOCOL_VERSION);
        if !version_ok {
            return Probe::disabled();
        }
        let socket = UnixDatagram::unbound()
            .ok()
            .filter(|s| s.connect(&path).is_ok() && s.set_nonblocking(true).is_ok());
        Probe {
            socket,
            dropped: AtomicU64::new(0),
            rank: rank_from_env(),
        }
    }

    /// A probe that sends nothing.
    pub fn disabled() -> Probe {
        Probe {
            socket: None,
            dropped: AtomicU64::new(0),
            rank: None,
        }
    }

    /// Whether messages go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// Messages the collector could not take (its socket buffer was full or it is gone).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Marks a stage (the step and phase are the last ones announced).
    pub fn mark(&self, stage: &str) {
        if self.socket.is_none() {
            return;
        }
        self.mark_with(stage, None, None, None);
    }

    /// Marks a stage with an explicit step, phase and the allocator's statistics.
    pub fn mark_with(
        &self,
        stage: &str,
        step: Option<u64>,
        phase: Option<Phase>,
        allocator: Option<&AllocatorStats>,
    ) {
        if self.socket.is_none() {
            return;
        }
        let mark = StageMark {
            name: stage.into(),
            allocator: allocator.copied(),
            pid: Some(std::process::id()),
            rank: self.rank,
            ..StageMark::default()
        };
        let context = Context {
            step,
            phase,
            ..Context::default()
        };
        self.send_message(&Message::Record(Record::Mark(mark), context));
    }

    /// Announces the current step (and epoch).
    pub fn step(&self, step: u64) {
        self.send_message(&Message::Step { step, epoch: None });
    }

    /// Announces the current phase.
    pub fn phase(&self, phase: Phase) {
        if phase != Phase::Unknown {
            self.send_message(&Message::Phase(phase));
        }
    }

    /// Records a note (newlines become spaces).
    pub fn note(&self, text: &str) {
        self.send_message(&Message::record(Record::Note(Note {
            t_us: 0,
            text: text.to_owned(),
        })));
    }

    /// Sends one protocol message.
    pub fn send_message(&self, message: &Message) {
        if self.socket.is_none() {
            return;
        }
        let mut line = String::with_capacity(256);
        protocol::format(&mut line, message);
        self.send(&line);
    }

    /// Sends one or more raw protocol lines (see [`oomscope_format::protocol`]).
    pub fn send(&self, lines: &str) {
        let Some(socket) = &self.socket else {
            return;
        };
        if socket.send(lines.as_bytes()).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::protocol::parse_datagram;

    #[test]
    fn a_disabled_probe_sends_nothing() {
        let p = Probe::disabled();
        p.mark("x");
        p.note("y");
        assert!(!p.is_enabled());
        assert_eq!(p.dropped(), 0);
    }

    #[test]
    fn marks_arrive_as_protocol_messages() {
        let dir = std::env::temp_dir().join(format!("oomscope-probe-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let _ = std::fs::remove_file(&path);
        let server = UnixDatagram::bind(&path).unwrap();
        let socket = UnixDatagram::unbound().unwrap();
        socket.connect(&path).unwrap();
        socket.set_nonblocking(true).unwrap();
        let probe = Probe {
            socket: Some(socket),
            dropped: AtomicU64::new(0),
            rank: Some(2),
        };
        probe.mark_with("post_forward", Some(7), Some(Phase::Train), None);
        let mut buf = [0u8; 1024];
        let n = server.recv(&mut buf).unwrap();
        let (messages, rejected) = parse_datagram(std::str::from_utf8(&buf[..n]).unwrap());
        assert_eq!(rejected, 0);
        let Message::Record(Record::Mark(mark), context) = &messages[0] else {
            panic!("{messages:?}");
        };
        assert_eq!(mark.name.as_ref(), "post_forward");
        assert_eq!((mark.pid, mark.rank), (Some(std::process::id()), Some(2)));
        assert_eq!(context.step, Some(7));
        // The collector is gone: sends are counted as dropped, never block or fail loudly.
        drop(server);
        probe.mark("after");
        assert_eq!(probe.dropped(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
