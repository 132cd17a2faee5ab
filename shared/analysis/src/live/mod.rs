//! What a live view shows of a run still being recorded (`collector watch`, `collector run
//! --live`, the page `collector serve` serves): the run's state now ([`LiveState`]: its place, each
//! memory against its limit, the alerts, the leak and when memory is full) and the one loop every
//! live view runs to keep it ([`LiveFeed`]). The words of all of it are the words crate's, so a
//! terminal and a browser say the same.

mod feed;
mod state;

pub use feed::{ANALYSIS_SHARE, LiveFeed, Refreshed};
pub use state::{
    ALERT_SHARE, Alert, CHART_POINTS, LiveChart, LiveLeak, LiveMemory, LiveState, live_state,
    readings, with_analysis,
};
