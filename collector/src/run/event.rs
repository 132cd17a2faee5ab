//! What the recorder hears from the other threads besides readings and marker messages (those
//! wait in the [`super::shared_state::PendingQueue`], in time order): a nudge that they wait, an OOM read on stderr,
//! records the collector made itself, and the end.

use oomscope_format::{OomEvent, ProcessExit};

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
    /// The child is gone: write its exit and close the trace.
    Finish {
        /// How it ended.
        exit: ProcessExit,
        /// A probable host OOM kill, when the evidence says so (only without `kills`).
        host_kill: Option<OomEvent>,
        /// The kernel's OOM kills of the program's processes.
        kills: Vec<oomscope_format::OomKill>,
    },
}
