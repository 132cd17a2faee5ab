//! Receiving marks, in one place: the marker socket's datagrams ([`socket`]) and the senders'
//! rings of shared memory ([`rings`]), read by the sampler thread between its ticks, parsed, put
//! in time order with the sender's own reading of itself (`at`), and handed to the recorder as
//! one kind of item, [`Pending::Message`] in the [`PendingQueue`](super::shared_state::PendingQueue)
//! ([`deliver`]: the tch `Session` recording itself hands its messages on the same way).
//!
//! Why the sampler's thread: a mark an untimed sender sent (the Rust `Probe`, a hand-written
//! client) gets the tree's reading the moment it is read, and a timed one completes the last
//! tick's row with its sender's own memory; both are rows the sampler owns ([`Readings`]).

mod rings;
mod socket;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use oomscope_format::Record;
use oomscope_format::protocol::{MAX_DATAGRAM_BYTES, Message};

use super::shared_state::{Pending, RunState};
use rings::{MAX_RINGS, MarkRing};
pub(crate) use socket::{Datagram, MarkerSocket};

/// What the inbox asks of the sampler for what it hands on: the readings that go with marks.
pub(crate) trait Readings {
    /// The run's shared state.
    fn state(&self) -> &RunState;
    /// The time of the last row or message handed to the recorder (times only grow there).
    fn handed_through_us(&self) -> u64;
    /// A timed mark's reading: what its sender read of itself at `t_us`.
    fn sender_reading(&mut self, t_us: u64, sender: Option<u32>, rss_bytes: u64, file_bytes: u64);
    /// An untimed mark arrived at `t_us`: the collector's own reading then.
    fn mark_reading(&mut self, t_us: u64);
    /// A message was handed on at `t_us`.
    fn handed_on(&mut self, t_us: u64);
}

/// Hands a message to the recorder (through [`RunState::pending`], behind the reading taken for
/// it), stamped `t_us` and with its sender's pid; what does not fit is counted.
pub(crate) fn deliver(state: &RunState, t_us: u64, message: Box<Message>, sender: Option<u32>) {
    let item = Pending::Message {
        t_us,
        message,
        sender,
    };
    if !state.pending.push(item) {
        state.dropped_messages.fetch_add(1, Ordering::Relaxed);
    }
}

/// How often a socket whose senders time their own messages is drained while they send
/// datagrams. The kernel queues 10 datagrams per Unix socket by default
/// (`net.unix.max_dgram_qlen`; a full queue makes a send fail, and the helper then carries the
/// line in its next datagram): every 2 ms keeps a loop that marks up to five times a millisecond
/// under it. An empty drain is one `ppoll`.
const DATAGRAMS_DRAIN_EVERY: Duration = Duration::from_millis(2);

/// ...and while they write into their rings only (the last drain read no datagram): a ring holds
/// 256 KiB, a second of a fast loop's marks, so the sampler need not wake five times a tick for
/// it (the wake-ups were most of the collector's cost of a hooked fast loop: ~500 a second). The
/// sampler drains at every tick too, so this only bounds the wait under a slow tick.
const RINGS_DRAIN_EVERY: Duration = Duration::from_millis(50);

/// Most datagrams one drain reads.
const MAX_DRAINED_DATAGRAMS: usize = 1024;

/// How often the rings of senders that exited are let go.
const RINGS_PRUNED_EVERY: Duration = Duration::from_secs(1);

/// Most drains after the program exited (each empties the rings; the socket's queue holds a
/// few datagrams, far under this many drains' worth).
const FINAL_DRAINS: usize = 64;

/// What receives the marks: datagrams read (and the senders' rings), and what they hold, handed
/// on in time order.
pub(crate) struct Inbox {
    datagram: Vec<u8>,
    drained: Vec<Drained>,
    /// A sender has timed its messages (`at`): the socket is drained on a schedule from now on.
    timed: bool,
    /// The last drain read a datagram (not only rings): the next comes soon.
    datagrams: bool,
    /// The senders' rings of shared memory (`ring`), read at every drain...
    rings: Vec<MarkRing>,
    /// ...found in the socket's directory, and let go once read after their senders exited
    /// (looked at every [`RINGS_PRUNED_EVERY`]).
    ring_dir: Option<PathBuf>,
    rings_pruned: Instant,
}

/// What a datagram holds, stamped with the time it happened.
enum Drained {
    /// The sender's reading of itself (`at … rss_bytes=`).
    Reading {
        t_us: u64,
        sender: Option<u32>,
        rss_bytes: u64,
        rss_file_bytes: u64,
    },
    /// A reading the collector takes for an untimed mark.
    Sample { t_us: u64 },
    /// A message for the recorder.
    Message {
        t_us: u64,
        message: Box<Message>,
        sender: Option<u32>,
    },
}

impl Drained {
    fn t_us(&self) -> u64 {
        match self {
            Drained::Reading { t_us, .. }
            | Drained::Sample { t_us }
            | Drained::Message { t_us, .. } => *t_us,
        }
    }
}

impl Inbox {
    /// An inbox for `socket` (its rings are made in the socket's directory).
    pub(crate) fn new(socket: Option<&MarkerSocket>) -> Inbox {
        Inbox {
            datagram: vec![0u8; MAX_DATAGRAM_BYTES],
            drained: Vec::new(),
            timed: false,
            datagrams: false,
            rings: Vec::new(),
            ring_dir: socket.map(|s| s.dir().to_owned()),
            rings_pruned: Instant::now(),
        }
    }

    /// Whether a sender has timed its messages (`at`, or a ring): the socket is then drained on
    /// a schedule ([`Inbox::drain_every`]) rather than waited on.
    pub(crate) fn timed(&self) -> bool {
        self.timed
    }

    /// When the next drain is due after this one: soon while datagrams come (the socket's queue
    /// is short), else when the rings could use it.
    pub(crate) fn drain_every(&self) -> Duration {
        if self.datagrams {
            DATAGRAMS_DRAIN_EVERY
        } else {
            RINGS_DRAIN_EVERY
        }
    }

    /// Waits up to `timeout` for a datagram (untimed senders: a mark is read the moment it
    /// comes) and hands on what it holds.
    pub(crate) fn wait(
        &mut self,
        socket: &MarkerSocket,
        timeout: Duration,
        readings: &mut impl Readings,
    ) {
        if let Some(got) = socket.recv_within(timeout, &mut self.datagram) {
            let state = readings.state();
            self.read(got, state.now_us(), state);
            self.apply(readings);
        }
    }

    /// After the program exited: what it sent last, all of it.
    pub(crate) fn drain_all(&mut self, socket: &MarkerSocket, readings: &mut impl Readings) {
        for _ in 0..FINAL_DRAINS {
            if !self.drain(socket, readings) {
                break;
            }
        }
    }

    /// Reads the datagrams waiting (true when more were waiting than one drain reads) and what
    /// the rings hold, and hands them on.
    pub(crate) fn drain(&mut self, socket: &MarkerSocket, readings: &mut impl Readings) -> bool {
        let state = readings.state();
        // Bounded: senders that refill the queue as fast as it is read must not hold off the
        // ticks (what is left waits for the next drain).
        let mut more = true;
        self.datagrams = false;
        for _ in 0..MAX_DRAINED_DATAGRAMS {
            let Some(got) = socket.recv_within(Duration::ZERO, &mut self.datagram) else {
                more = false;
                break;
            };
            self.datagrams = true;
            self.read(got, state.now_us(), state);
        }
        self.read_rings(state);
        self.apply(readings);
        more
    }

    /// Reads what each ring holds since the last drain: all that was written when the drain
    /// came to it (at most a ring's capacity), so that a datagram its sender sent while the ring
    /// was full, read just before, is sorted among the older messages of the ring and never
    /// handed on ahead of them. A ring found corrupt is read no further, counted as a rejected
    /// line.
    fn read_rings(&mut self, state: &RunState) {
        // Whose senders have exited is asked before reading: what such a ring holds then is all
        // it will ever hold, and it is let go once read.
        let prune = self.rings_pruned.elapsed() >= RINGS_PRUNED_EVERY;
        if prune {
            self.rings_pruned = Instant::now();
        }
        let mut i = 0;
        while i < self.rings.len() {
            let gone = prune && self.rings[i].sender_gone();
            let written = self.rings[i].written();
            let broken = loop {
                match self.rings[i].next(written, &mut self.datagram) {
                    Ok(Some(len)) => {
                        let got = Datagram {
                            len,
                            sender: Some(self.rings[i].sender),
                        };
                        self.read(got, state.now_us(), state);
                    }
                    Ok(None) => break false,
                    Err(_) => break true,
                }
            };
            if broken {
                state.rejected_lines.fetch_add(1, Ordering::Relaxed);
                self.rings.swap_remove(i);
            } else if gone {
                self.rings.swap_remove(i);
            } else {
                self.rings[i].release();
                i += 1;
            }
        }
    }

    /// Parses one datagram that arrived (or was read) at `arrival_us`. Messages after an `at`
    /// take its time; an untimed mark gets the collector's reading at arrival, once per datagram;
    /// a ring announced is mapped (from the socket's directory), to be read from the next drain.
    fn read(&mut self, got: Datagram, arrival_us: u64, state: &RunState) {
        let mut t_us = arrival_us;
        let mut timed = false;
        let mut sampled = false;
        for message in MarkerSocket::parse(&self.datagram[..got.len], state) {
            match message {
                Message::At(at) => {
                    self.timed = true;
                    timed = true;
                    t_us = state.trace_time_of(at.mono_us).unwrap_or(arrival_us);
                    if let Some(rss_bytes) = at.rss_bytes {
                        self.drained.push(Drained::Reading {
                            t_us,
                            sender: got.sender,
                            rss_bytes,
                            rss_file_bytes: at.rss_file_bytes.unwrap_or(0),
                        });
                    }
                }
                Message::Ring(name) => {
                    let opened = match (&self.ring_dir, got.sender) {
                        (Some(dir), Some(pid)) if self.rings.len() < MAX_RINGS => {
                            Some(MarkRing::open(dir, &name, pid))
                        }
                        _ => None,
                    };
                    match opened {
                        Some(Ok(ring)) => {
                            // Its messages are timed: drained on the schedule.
                            self.timed = true;
                            self.rings.push(ring);
                        }
                        _ => {
                            state.rejected_lines.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                message => {
                    let mark = matches!(message, Message::Record(Record::Mark(_), _));
                    if mark && !timed && !sampled {
                        sampled = true;
                        self.drained.push(Drained::Sample { t_us });
                    }
                    self.drained.push(Drained::Message {
                        t_us,
                        message: Box::new(message),
                        sender: got.sender,
                    });
                }
            }
        }
    }

    /// Hands what was read to the recorder in time order (several senders' datagrams
    /// interleave), never before what was handed on already: each sender's own reading, a
    /// reading for an untimed mark, then the messages.
    fn apply(&mut self, readings: &mut impl Readings) {
        self.drained.sort_by_key(Drained::t_us);
        for item in self.drained.drain(..) {
            let t_us = item.t_us().max(readings.handed_through_us());
            match item {
                Drained::Reading {
                    sender,
                    rss_bytes,
                    rss_file_bytes,
                    ..
                } => readings.sender_reading(t_us, sender, rss_bytes, rss_file_bytes),
                Drained::Sample { .. } => readings.mark_reading(t_us),
                Drained::Message {
                    message, sender, ..
                } => {
                    deliver(readings.state(), t_us, message, sender);
                    readings.handed_on(t_us);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::shared_state::monotonic_us;

    /// What a datagram of `text` from pid 7, arriving at `arrival_us`, is read as.
    fn read(inbox: &mut Inbox, state: &RunState, text: &str, arrival_us: u64) {
        inbox.datagram[..text.len()].copy_from_slice(text.as_bytes());
        let got = Datagram {
            len: text.len(),
            sender: Some(7),
        };
        inbox.read(got, arrival_us, state);
    }

    /// (time, what) of each item read.
    fn items(inbox: &Inbox) -> Vec<(u64, String)> {
        inbox
            .drained
            .iter()
            .map(|d| {
                let what = match d {
                    Drained::Reading { rss_bytes, .. } => format!("reading {rss_bytes}"),
                    Drained::Sample { .. } => "sample".to_owned(),
                    Drained::Message { message, .. } => {
                        let mut line = String::new();
                        oomscope_format::protocol::format(&mut line, message);
                        line.trim_end().to_owned()
                    }
                };
                (d.t_us(), what)
            })
            .collect()
    }

    #[test]
    fn timed_messages_keep_their_senders_time_and_reading_and_untimed_marks_get_one_taken() {
        let state = RunState::new(&[], std::process::id());
        std::thread::sleep(Duration::from_millis(20));
        // The run's start on the sender's clock, to within the gap between the two readings (a
        // preempted test thread makes it hundreds of microseconds).
        let mono = monotonic_us();
        let start = mono - state.now_us();
        let mut inbox = Inbox::new(None);
        let text = format!(
            "at {} rss_bytes=100 rss_file_bytes=10\nmark a\nat {}\nnote x\nmark b",
            mono - 15_000,
            mono - 5_000
        );
        read(&mut inbox, &state, &text, 19_999);
        assert!(
            inbox.timed,
            "from now on the socket is drained on a schedule"
        );
        let got = items(&inbox);
        let t = |mono_then: u64| mono_then - start;
        let near = |a: u64, b: u64| a.abs_diff(b) <= 2_000;
        let what: Vec<&str> = got.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(what, ["reading 100", "mark a", "note x", "mark b"]);
        assert!(
            near(got[0].0, t(mono - 15_000)) && got[1].0 == got[0].0,
            "{got:?}"
        );
        assert!(
            near(got[2].0, t(mono - 5_000)) && got[3].0 == got[2].0,
            "{got:?}"
        );
        // A time not within the run (another clock) is the arrival's; an untimed mark gets the
        // collector's reading at arrival, once for its datagram.
        inbox.drained.clear();
        read(&mut inbox, &state, "at 5\nmark c", 19_999);
        read(&mut inbox, &state, "mark d\nmark e", 20_000);
        assert_eq!(
            items(&inbox),
            [
                (19_999, "mark c".to_owned()),
                (20_000, "sample".to_owned()),
                (20_000, "mark d".to_owned()),
                (20_000, "mark e".to_owned())
            ]
        );
    }
}
