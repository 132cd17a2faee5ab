//! A trace file followed while its run writes it: the file read as it grows and handed to the
//! analysis's live feed (`oomscope_analysis::live::LiveFeed`, the loop every live view
//! shares, with its throttle), for what `collector watch` shows for each trace it follows and
//! `collector run --live` adds to the status line.
//!
//! Why it reads the file and nothing else: the recorder must never wait for a viewer (memray's
//! live mode blocked the traced program when its reader fell behind), and the trace is already
//! crash-safe and flushed at least once a second. Each refresh reads only the bytes appended
//! since the last, in pieces, so the first read of a day-long trace never sits in memory beside
//! its decoding.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use oomscope_analysis::live::LiveState;
use oomscope_analysis::live::{LiveFeed, Refreshed};

/// The most of a file read at once.
const READ_PIECE_BYTES: u64 = 4 << 20;

/// A trace being followed.
#[derive(Debug)]
pub struct LiveTrace {
    /// Its file (which may not exist yet).
    pub path: PathBuf,
    file: Option<File>,
    /// What was read of it, decoded and analysed.
    pub feed: LiveFeed,
    /// When its file last grew.
    pub grew_at: Instant,
    /// The state changed since the caller last took note ([`LiveTrace::take_fresh`]).
    fresh: bool,
}

/// Milliseconds on this process's monotonic clock: the live feed's throttle reads it.
fn now_ms() -> f64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
}

impl LiveTrace {
    /// A follower of `path`, not read yet.
    pub fn new(path: PathBuf) -> LiveTrace {
        LiveTrace {
            path,
            file: None,
            feed: LiveFeed::default(),
            grew_at: Instant::now(),
            fresh: false,
        }
    }

    /// Whether its file was found (and opened).
    pub fn found(&self) -> bool {
        self.file.is_some()
    }

    /// Whether the state changed since this was last asked.
    pub fn take_fresh(&mut self) -> bool {
        std::mem::take(&mut self.fresh)
    }

    /// The live state, once something was read.
    pub fn state(&self) -> Option<&LiveState> {
        self.feed.state()
    }

    /// Reads what was appended to the file and brings the live state up to it (the analysis
    /// when it is due). `buf` is scratch space kept between calls.
    pub fn refresh(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(file) => self.file = Some(file),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot read {}", self.path.display()));
                }
            }
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        loop {
            buf.clear();
            Read::by_ref(file)
                .take(READ_PIECE_BYTES)
                .read_to_end(buf)
                .with_context(|| format!("cannot read {}", self.path.display()))?;
            if buf.is_empty() {
                break;
            }
            self.grew_at = Instant::now();
            if let Err(e) = self.feed.push(buf) {
                bail!("cannot follow {}: {e}", self.path.display());
            }
            if (buf.len() as u64) < READ_PIECE_BYTES {
                break;
            }
        }
        self.fresh |= self.feed.refresh(&now_ms) != Refreshed::Nothing;
        Ok(())
    }
}
