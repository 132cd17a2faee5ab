//! What launchers print about their ranks, read into facts: torchrun's `ChildFailedError`
//! summary (which rank failed first, how each ended) and the `[rankN]: ` prefix PyTorch puts on a
//! rank's uncaught exception.
//!
//! Why read text: a launcher's workers are not the collector's children, so their exit codes are
//! the launcher's to read; torchrun states them in a fixed block at its end. The block, as
//! torchrun 2.x prints it (captured here from torch 2.11 with a rank SIGKILLed, see the tests):
//!
//! ```text
//! torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
//! ============================================================
//! train.py FAILED
//! ------------------------------------------------------------
//! Failures:
//! [1]:
//!   time      : 2026-11-23_06:52:20
//!   host      : localhost
//!   rank      : 0 (local_rank: 0)
//!   exitcode  : -15 (pid: 5445)
//!   error_file: <N/A>
//!   traceback : Signal 15 (SIGTERM) received by PID 5445
//! ------------------------------------------------------------
//! Root Cause (first observed failure):
//! [0]:
//!   …
//!   rank      : 1 (local_rank: 1)
//!   exitcode  : -9 (pid: 5446)
//! ============================================================
//! ```
//!
//! A negative exit code is the signal that ended the rank (`-9`: SIGKILL, the kernel's OOM killer's
//! signature).

use crate::model::{ExitStatus, ProcessEnd};

/// Reads torchrun's failure summary line by line (stderr arrives in pieces).
#[derive(Debug, Default)]
pub struct ChildFailedSummary {
    /// Inside the block: how many `====` rules seen (the block ends at the second).
    rules: u8,
    inside: bool,
    root_cause: bool,
    current: Option<ProcessEnd>,
    ends: Vec<ProcessEnd>,
}

impl ChildFailedSummary {
    /// Takes one line of stderr; returns the ranks' ends when this line closes a summary.
    pub fn feed(&mut self, line: &str) -> Option<Vec<ProcessEnd>> {
        let line = line.trim_end();
        if !self.inside {
            if line.contains("ChildFailedError") {
                *self = ChildFailedSummary {
                    inside: true,
                    ..ChildFailedSummary::default()
                };
            }
            return None;
        }
        let trimmed = line.trim();
        if trimmed.len() >= 8 && trimmed.bytes().all(|b| b == b'=') {
            self.rules += 1;
            if self.rules >= 2 {
                self.close_entry();
                self.inside = false;
                return Some(std::mem::take(&mut self.ends));
            }
            return None;
        }
        if trimmed.starts_with("Root Cause") {
            self.close_entry();
            self.root_cause = true;
        } else if trimmed.starts_with("Failures:") {
            self.close_entry();
            self.root_cause = false;
        } else if trimmed.starts_with('[') && trimmed.ends_with("]:") {
            self.close_entry();
            self.current = Some(ProcessEnd {
                first_failure: self.root_cause,
                from_launcher: true,
                ..ProcessEnd::default()
            });
        } else if let (Some(end), Some((key, value))) =
            (self.current.as_mut(), trimmed.split_once(':'))
        {
            let value = value.trim();
            match key.trim() {
                // `1 (local_rank: 1)`
                "rank" => {
                    end.rank = leading_number(value).and_then(|r| u32::try_from(r).ok());
                    end.local_rank = value
                        .split_once("local_rank:")
                        .and_then(|(_, l)| leading_number(l.trim()))
                        .and_then(|l| u32::try_from(l).ok());
                }
                // `-9 (pid: 5446)`
                "exitcode" => {
                    end.status = leading_number(value).and_then(|c| {
                        let c = i32::try_from(c).ok()?;
                        Some(if c < 0 {
                            ExitStatus::Signal(-c)
                        } else {
                            ExitStatus::Code(c)
                        })
                    });
                    end.pid = value
                        .split_once("pid:")
                        .and_then(|(_, p)| leading_number(p.trim()))
                        .and_then(|p| u32::try_from(p).ok())
                        .unwrap_or(0);
                }
                _ => {}
            }
        }
        None
    }

    fn close_entry(&mut self) {
        if let Some(end) = self.current.take()
            && (end.rank.is_some() || end.pid != 0)
        {
            self.ends.push(end);
        }
    }
}

/// A leading (possibly negative) decimal number.
fn leading_number(text: &str) -> Option<i64> {
    let end = text
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || (*i == 0 && *c == '-')))
        .map_or(text.len(), |(i, _)| i);
    text[..end].parse().ok()
}

/// PyTorch prints a rank's uncaught exception with its rank in front of every line
/// (`[rank1]: RuntimeError: …`, torch ≥ 2.2 under torch.distributed): the rank and the rest.
pub fn rank_prefix(line: &str) -> (Option<u32>, &str) {
    let trimmed = line.trim_start();
    if let Some(rest) = trimmed.strip_prefix("[rank")
        && let Some((number, after)) = rest.split_once("]:")
        && let Ok(rank) = number.parse()
    {
        return (Some(rank), after.strip_prefix(' ').unwrap_or(after));
    }
    (None, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torchrun 2.11's summary, captured on the development machine (a rank SIGKILLed, the other
    /// stopped with SIGTERM by the agent).
    const SUMMARY: &str = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
======================================================
/tmp/tr_fail.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_06:52:20
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 5445)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 5445
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_06:52:20
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 5446)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 5446
======================================================
";

    #[test]
    fn torchruns_summary_names_the_first_failure_and_every_end() {
        let mut summary = ChildFailedSummary::default();
        let mut got = None;
        for line in SUMMARY.lines() {
            if let Some(ends) = summary.feed(line) {
                got = Some(ends);
            }
        }
        let ends = got.expect("the block closes");
        assert_eq!(ends.len(), 2);
        assert_eq!(
            (
                ends[0].rank,
                ends[0].local_rank,
                ends[0].pid,
                ends[0].status
            ),
            (Some(0), Some(0), 5445, Some(ExitStatus::Signal(15)))
        );
        assert!(!ends[0].first_failure && ends[0].from_launcher);
        assert_eq!(
            (ends[1].rank, ends[1].pid, ends[1].status),
            (Some(1), 5446, Some(ExitStatus::Signal(9)))
        );
        assert!(ends[1].first_failure);
        // An exit code, not a signal.
        let mut s = ChildFailedSummary::default();
        let text = SUMMARY.replace("-9 (pid: 5446)", "1 (pid: 5446)");
        let ends = text.lines().find_map(|l| s.feed(l)).unwrap();
        assert_eq!(ends[1].status, Some(ExitStatus::Code(1)));
    }

    #[test]
    fn lines_outside_a_summary_say_nothing() {
        let mut s = ChildFailedSummary::default();
        for line in [
            "[1]:",
            "  rank      : 0 (local_rank: 0)",
            "======================",
        ] {
            assert_eq!(s.feed(line), None);
        }
    }

    #[test]
    fn rank_prefixes_are_read() {
        assert_eq!(
            rank_prefix("[rank1]: RuntimeError: boom"),
            (Some(1), "RuntimeError: boom")
        );
        assert_eq!(rank_prefix("[rankx]: a"), (None, "[rankx]: a"));
        assert_eq!(rank_prefix("plain"), (None, "plain"));
    }
}
