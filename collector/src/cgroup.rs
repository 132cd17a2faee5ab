//! The memory cgroup a process runs in, v1 or v2: its limit and its count of OOM kills.
//!
//! Containers, Slurm jobs and Kubernetes pods put a program under a memory cgroup whose limit,
//! not the host's RAM, is what runs out; and the kernel counts every process its OOM killer
//! takes there. Many clusters still run cgroup v1, so both layouts are read:
//!
//! | | v2 (`0::/path`) | v1 (`N:memory:/path`) |
//! |---|---|---|
//! | limit | `memory.max` (`max` = none) | `memory.limit_in_bytes` (≈ 2^63 = none) |
//! | OOM kills | `memory.events`: `oom_kill N` | `memory.oom_control`: `oom_kill N` |
//!
//! The path in `/proc/PID/cgroup` is relative to the cgroup namespace's root, which is what is
//! mounted at `/sys/fs/cgroup` inside a container, so it is joined to the mount point.

use std::path::PathBuf;

/// Where cgroup file systems are mounted.
const ROOT: &str = "/sys/fs/cgroup";

/// Limits at or above this are "no limit" (v1 writes 2^63 rounded down to a page).
const NO_LIMIT: u64 = 1 << 62;

/// One memory cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCgroup {
    /// Its directory.
    pub dir: PathBuf,
    /// Its path as `/proc/PID/cgroup` gives it (`/job/123`).
    pub path: String,
    /// v2 (unified) or v1.
    pub unified: bool,
}

impl MemoryCgroup {
    /// The memory cgroup of `pid` (`None` when no memory controller is mounted or readable).
    pub fn of_pid(pid: u32) -> Option<MemoryCgroup> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        MemoryCgroup::from_proc_cgroup(&text, ROOT)
    }

    /// The memory cgroup named in a `/proc/PID/cgroup` text, under the mount point `root`; v1's
    /// memory controller wins over the unified line when both exist (hybrid hosts: the limit
    /// lives there).
    pub fn from_proc_cgroup(text: &str, root: &str) -> Option<MemoryCgroup> {
        let v1 = text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_owned())
        });
        if let Some(path) = v1 {
            let dir = PathBuf::from(format!("{root}/memory{path}"));
            if dir.join("memory.oom_control").exists() {
                return Some(MemoryCgroup {
                    dir,
                    path,
                    unified: false,
                });
            }
        }
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned();
        let dir = PathBuf::from(format!("{root}{path}"));
        dir.join("memory.events").exists().then_some(MemoryCgroup {
            dir,
            path,
            unified: true,
        })
    }

    /// Its memory limit, when one is set.
    pub fn limit_bytes(&self) -> Option<u64> {
        let file = if self.unified {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.trim().parse().ok().filter(|&l: &u64| l < NO_LIMIT)
    }

    /// Processes its OOM killer has killed since the cgroup was made.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = if self.unified {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_lines_name_the_memory_cgroup() {
        let dir = std::env::temp_dir().join(format!("oomscope-cgroup-{}", std::process::id()));
        let v1 = dir.join("memory/job/7");
        let v2 = dir.join("slice/job.scope");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(
            v1.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), "419430400\n").unwrap();
        std::fs::write(
            v2.join("memory.events"),
            "low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n",
        )
        .unwrap();
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        let root = dir.to_str().unwrap();

        let hybrid = "12:pids:/job/7\n4:memory:/job/7\n0::/slice/job.scope\n";
        let c = MemoryCgroup::from_proc_cgroup(hybrid, root).unwrap();
        assert_eq!((c.path.as_str(), c.unified), ("/job/7", false));
        assert_eq!((c.limit_bytes(), c.oom_kills()), (Some(400 << 20), Some(3)));

        let unified = "0::/slice/job.scope\n";
        let c = MemoryCgroup::from_proc_cgroup(unified, root).unwrap();
        assert!(c.unified);
        assert_eq!((c.limit_bytes(), c.oom_kills()), (None, Some(2)));

        assert_eq!(MemoryCgroup::from_proc_cgroup("0::/nowhere\n", root), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
