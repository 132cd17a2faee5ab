//! What the recorder hears from the other threads besides readings and marker messages (those
//! wait in the [`super::shared_state::PendingQueue`], in time order): a nudge that they wait, an OOM read on stderr,
//! records the collector made itself, and the end.

use oomscope_format::{Attach, OomEvent, ProcessExit};

/// Events for the recorder. The channel holds `recording::CHANNEL_EVENTS` of them; producers
/// never wait.
#[derive(Debug)]
pub enum Event {
    /// Readings and marker messages wait in [`super::shared_state::PendingQueue`]: write them (a nudge; what waits
    /// is taken at every event anyway).
    Pending,
    /// An OOM error recognised on the program's stderr (left out when the program itself
    /// already reported it: its traceback).
    StderrOom(OomEvent),
    /// Records the collector made itself, complete (who the tree's processes are, their ends):
    /// written as they are.
    Records(Vec<oomscope_format::Record>),
    /// The watched process is gone (or an attached recorder stops): write how and close the
    /// trace.
    Finish {
        /// How it ended.
        ending: Ending,
        /// A probable host OOM kill, when the evidence says so (only without `kills`).
        host_kill: Option<OomEvent>,
        /// The kernel's OOM kills of the program's processes.
        kills: Vec<oomscope_format::OomKill>,
    },
}

/// How a recording ends: the exit of a process the collector started (or is), or the end of an
/// attached recorder's watch, which knows no exit status.
#[derive(Debug, Clone, Copy)]
pub enum Ending {
    /// The watched process exited, as its parent saw.
    Exited(ProcessExit),
    /// The attached recorder's watch ended: the process ended, or the recorder stopped.
    Watch(Attach),
}

impl Ending {
    /// When.
    pub fn t_us(&self) -> u64 {
        match self {
            Ending::Exited(e) => e.t_us,
            Ending::Watch(a) => a.t_us,
        }
    }
}
