//! The kernel's own account of the OOM kills during a run.
//!
//! A process the OOM killer takes just receives SIGKILL: from outside it looks like any other
//! `kill -9`. The kernel, though, says what it did: the memory cgroup's `oom_kill` counter rises
//! ([`crate::cgroup`]) and the kernel log gets `Killed process PID (name) ... anon-rss:...`
//! (`/dev/kmsg`, readable by root and by users when `dmesg_restrict` is 0). At the start of a
//! run the counter is read and the kernel log is opened at its end; when the program has exited,
//! both are read again, and every kill of a process of the program's tree (the program, a
//! DataLoader worker, a rank) becomes an [`OomKill`] record. Neither source readable: no record,
//! and the analysis falls back to "probably" from a SIGKILL near the limit.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use crate::cgroup::MemoryCgroup;
use oomscope_analysis::oom_text::kernel_kill;
use oomscope_format::{ExitStatus, OomKill};

/// Watches one run for OOM kills.
pub struct KillWatch {
    cgroup: Option<MemoryCgroup>,
    kills_at_start: Option<u64>,
    kmsg: Option<File>,
    /// The kernel log's clock (µs since boot, CLOCK_MONOTONIC) minus the trace's at the start.
    clock_offset_us: i64,
}

/// The end of a run, as [`KillWatch::finish`] needs it.
pub struct RunEnd<'a> {
    /// The watched program.
    pub child_pid: u32,
    /// Every process seen in its tree.
    pub tree_pids: &'a [u32],
    /// How it ended (`None`: not known, the recorder is not its parent).
    pub status: Option<ExitStatus>,
    /// When (trace time).
    pub t_us: u64,
    /// The tree's last sampled RSS.
    pub rss_bytes: Option<u64>,
}

impl KillWatch {
    /// Reads the counter of `child_pid`'s memory cgroup and opens the kernel log at its end;
    /// `trace_now_us` is the trace's clock now.
    pub fn start(child_pid: u32, trace_now_us: u64) -> KillWatch {
        let cgroup =
            MemoryCgroup::of_pid(child_pid).or_else(|| MemoryCgroup::of_pid(std::process::id()));
        let kills_at_start = cgroup.as_ref().and_then(MemoryCgroup::oom_kills);
        KillWatch {
            cgroup,
            kills_at_start,
            kmsg: open_kmsg_at_end(),
            clock_offset_us: monotonic_us() - i64::try_from(trace_now_us).unwrap_or(i64::MAX),
        }
    }

    /// The memory cgroup's limit, when the program runs under one.
    pub fn limit_bytes(&self) -> Option<u64> {
        self.cgroup.as_ref().and_then(MemoryCgroup::limit_bytes)
    }

    /// The kills of the run's processes the kernel accounted for, in time order.
    pub fn finish(mut self, end: &RunEnd<'_>) -> Vec<OomKill> {
        let limit_bytes = self.limit_bytes();
        let cgroup_path = self.cgroup.as_ref().map_or("", |c| c.path.as_str());
        let rose = match (
            self.kills_at_start,
            self.cgroup.as_ref().and_then(MemoryCgroup::oom_kills),
        ) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => 0,
        };
        let mut kills: Vec<OomKill> = self
            .kmsg
            .as_mut()
            .map(read_kills)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, k)| k.pid == end.child_pid || end.tree_pids.contains(&k.pid))
            .map(|(t_kernel_us, k)| OomKill {
                t_us: u64::try_from(t_kernel_us - self.clock_offset_us)
                    .unwrap_or(0)
                    .min(end.t_us),
                pid: k.pid,
                process: k.process.as_str().into(),
                main_process: k.pid == end.child_pid,
                from_kernel_log: true,
                from_cgroup_counter: rose > 0 && !k.global,
                global: k.global,
                rss_bytes: k.rss_bytes,
                limit_bytes: limit_bytes.filter(|_| !k.global),
                cgroup: cgroup_path.into(),
            })
            .collect();
        if kills.is_empty() && rose > 0 {
            // The counter alone: the program itself when it died of SIGKILL, else another
            // process of its cgroup (a worker, most often).
            let main_process = end.status == Some(ExitStatus::Signal(libc::SIGKILL));
            kills.push(OomKill {
                t_us: end.t_us,
                pid: if main_process { end.child_pid } else { 0 },
                process: "".into(),
                main_process,
                from_kernel_log: false,
                from_cgroup_counter: true,
                global: false,
                rss_bytes: end.rss_bytes.filter(|_| main_process),
                limit_bytes,
                cgroup: cgroup_path.into(),
            });
        }
        kills.sort_by_key(|k| k.t_us);
        kills
    }
}

/// CLOCK_MONOTONIC in µs, the kernel log's clock.
fn monotonic_us() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts);
    }
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000
}

/// `/dev/kmsg` opened without blocking and positioned after the last message, so only what the
/// kernel logs from now on is read.
fn open_kmsg_at_end() -> Option<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor we own; SEEK_END on /dev/kmsg skips to after the newest
    // record.
    let at = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
    (at >= 0).then_some(file)
}

/// Every `Killed process` record logged since the file was positioned, with its time (µs since
/// boot). Each read returns one record: `priority,sequence,time_us,flags;text`.
fn read_kills(kmsg: &mut File) -> Vec<(i64, oomscope_analysis::oom_text::KernelKill)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    // A bounded loop: the log holds at most a few thousand records.
    for _ in 0..100_000 {
        let n = match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            // Overwritten records (EPIPE): the next read goes on with the oldest one left.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        };
        let record = String::from_utf8_lossy(&buf[..n]);
        let Some((prefix, text)) = record.split_once(';') else {
            continue;
        };
        let Some(t_us) = prefix.split(',').nth(2).and_then(|t| t.parse::<i64>().ok()) else {
            continue;
        };
        if let Some(kill) = kernel_kill(text.lines().next().unwrap_or("")) {
            out.push((t_us, kill));
        }
    }
    out
}
