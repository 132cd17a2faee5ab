//! What launchers print about their ranks, read into facts: torchrun's `ChildFailedError`
//! summary (which rank failed first, how each ended), the `[rankN]: ` prefix PyTorch puts on a
//! rank's uncaught exception, and Slurm's word that a step's tasks were OOM-killed
//! ([`slurm_oom`]).
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

use oomscope_format::{ExitStatus, ProcessEnd};

/// What Slurm says when its memory cgroup killed a step's tasks. Real lines (Slurm 21.08+
/// `task_cgroup_memory.c`, older releases, and `srun` naming the tasks):
///
/// ```text
/// slurmstepd: error: Detected 1 oom_kill event in StepId=6959634.0. Some of the step tasks have been OOM Killed.
/// srun: error: holy8a24101: task 0: Out Of Memory
/// slurmstepd-ideafix03: error: Detected 1 oom_kill event in StepId=4833316.0. Some of the step tasks have been OOM Killed.
/// slurmstepd: error: Detected 1 oom-kill event(s) in step 997857.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.
/// ```
///
/// (FAS Research Computing's and two other sites' user documentation, and Sigma2's
/// `jobs/common_job_failures.md`; the sources are in the tests.) `srun` writes task lists as
/// ranges: `tasks 0-19`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmOom {
    /// `srun: error: NODE: task(s) LIST: Out Of Memory`: these tasks (ranks: a task's id is its
    /// `SLURM_PROCID`) were killed.
    Tasks {
        /// The node.
        node: String,
        /// The tasks.
        tasks: Vec<u32>,
    },
    /// `slurmstepd: … Detected N oom_kill event(s) in StepId=J.S`: the step's cgroup counted
    /// kills (which task, `srun`'s line says).
    StepEvents {
        /// How many.
        count: u64,
        /// The step (`6959634.0`, `997857.batch`).
        step: String,
    },
}

/// Reads one line of Slurm's about OOM kills; `None` for any other line.
pub fn slurm_oom(line: &str) -> Option<SlurmOom> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("srun: error: ") {
        let rest = rest.strip_suffix(": Out Of Memory")?;
        let (node, list) = rest.split_once(": ")?;
        let list = list
            .strip_prefix("tasks ")
            .or_else(|| list.strip_prefix("task "))?;
        let tasks = task_list(list)?;
        return Some(SlurmOom::Tasks {
            node: node.to_owned(),
            tasks,
        });
    }
    // `slurmstepd: error:`, `slurmstepd-NODE: error:` or a timestamped `[…] error:`.
    let (_, rest) = line.split_once("error: Detected ")?;
    let (count, rest) = rest.split_once(' ')?;
    let count = count.parse().ok()?;
    let rest = rest
        .strip_prefix("oom_kill event")
        .or_else(|| rest.strip_prefix("oom-kill event"))?;
    let (_, step) = rest.split_once(" in ")?;
    let step = step
        .strip_prefix("StepId=")
        .or_else(|| step.strip_prefix("step "))?;
    let step = step
        .split(|c: char| c.is_whitespace())
        .next()?
        .trim_end_matches('.');
    Some(SlurmOom::StepEvents {
        count,
        step: step.to_owned(),
    })
}

/// `0`, `0-3`, `0-3,7,9-10` (at most 65 536 tasks: a line is not trusted to be sane).
fn task_list(list: &str) -> Option<Vec<u32>> {
    let mut tasks = Vec::new();
    for part in list.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let n = part.trim().parse::<u32>().ok()?;
                (n, n)
            }
        };
        if b < a || tasks.len() as u64 + u64::from(b - a) >= 65_536 {
            return None;
        }
        tasks.extend(a..=b);
    }
    Some(tasks)
}

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
    #[test]
    fn slurm_s_oom_kill_lines_name_their_tasks_and_step() {
        // FAS Research Computing (Harvard) user docs, an OpenMP job over its --mem-per-cpu.
        assert_eq!(
            slurm_oom("srun: error: holy8a24101: task 0: Out Of Memory"),
            Some(SlurmOom::Tasks {
                node: "holy8a24101".into(),
                tasks: vec![0]
            })
        );
        assert_eq!(
            slurm_oom(
                "slurmstepd: error: Detected 1 oom_kill event in StepId=6959634.0. Some of the step tasks have been OOM Killed."
            ),
            Some(SlurmOom::StepEvents {
                count: 1,
                step: "6959634.0".into()
            })
        );
        // A site running slurmd per node name (`slurmstepd-NODE`), and a timestamped log line.
        assert_eq!(
            slurm_oom(
                "slurmstepd-ideafix03: error: Detected 1 oom_kill event in StepId=4833316.0. Some of the step tasks have been OOM Killed."
            ),
            Some(SlurmOom::StepEvents {
                count: 1,
                step: "4833316.0".into()
            })
        );
        assert_eq!(
            slurm_oom(
                "[2026-03-28T14:27:13.072] error: Detected 2 oom_kill events in StepId=10483536.batch. Some of the step tasks have been OOM Killed."
            ),
            Some(SlurmOom::StepEvents {
                count: 2,
                step: "10483536.batch".into()
            })
        );
        // Older releases (UNINETTSigma2/documentation jobs/common_job_failures.md; nesi/support-docs
        // docs/General/FAQs/What_does_oom-kill_mean.md).
        assert_eq!(
            slurm_oom(
                "slurmstepd: error: Detected 1 oom-kill event(s) in step 997857.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler."
            ),
            Some(SlurmOom::StepEvents {
                count: 1,
                step: "997857.batch".into()
            })
        );
        // srun's ranges (its `tasks 0-19: Exited with exit code 1` uses the same list).
        assert_eq!(
            slurm_oom("srun: error: gpu-a-12: tasks 0-2,5: Out Of Memory"),
            Some(SlurmOom::Tasks {
                node: "gpu-a-12".into(),
                tasks: vec![0, 1, 2, 5]
            })
        );
        for other in [
            "srun: error: skl-a-47: tasks 0-19: Exited with exit code 1",
            "srun: error: n1: tasks 0-4294967295: Out Of Memory",
            "RuntimeError: CUDA out of memory.",
            "",
        ] {
            assert_eq!(slurm_oom(other), None, "{other}");
        }
    }
}
