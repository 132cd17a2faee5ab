//! Finding live processes through `/proc`, for the `processes` rules of a script.

use std::fs;

/// What the fake needs from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub pid: u32,
    pub state: char,
    pub ppid: u32,
}

impl Stat {
    /// A zombie (`Z`) or dead (`X`/`x`) process no longer holds any GPU memory, so a real driver
    /// would not list it.
    pub(crate) fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the start of `/proc/<pid>/stat`: `pid (comm) state ppid ...`. `comm` may itself
/// contain spaces and parentheses, so the state follows the *last* `)`.
pub(crate) fn parse_stat(content: &str) -> Option<Stat> {
    let (pid, rest) = content.split_once(" (")?;
    let close = rest.rfind(')')?;
    let mut fields = rest[close + 1..].split_ascii_whitespace();
    let state = fields.next()?;
    let mut state_chars = state.chars();
    let (Some(state), None) = (state_chars.next(), state_chars.next()) else {
        return None;
    };
    let ppid = fields.next()?.parse().ok()?;
    Some(Stat {
        pid: pid.trim().parse().ok()?,
        state,
        ppid,
    })
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` names a live (not zombie) process.
pub(crate) fn is_live(pid: u32) -> bool {
    read_stat(pid).is_some_and(|stat| stat.pid == pid && stat.is_live())
}

/// The live processes whose parent is `parent`, in ascending pid order.
pub(crate) fn live_children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        // Processes may exit between the listing and the read; those are skipped.
        .filter_map(read_stat)
        .filter(|stat| stat.ppid == parent && stat.is_live())
        .map(|stat| stat.pid)
        .collect();
    children.sort_unstable();
    children
}

/// The `RANK` a process was started with (`/proc/<pid>/environ`).
fn rank_of(pid: u32) -> Option<u32> {
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(b"RANK="))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
}

/// The live processes started with `RANK=rank` whose parent was not, in ascending pid order.
pub(crate) fn live_ranks(rank: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read_stat)
        .filter(|stat| stat.is_live() && rank_of(stat.pid) == Some(rank))
        .filter(|stat| rank_of(stat.ppid) != Some(rank))
        .map(|stat| stat.pid)
        .collect();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_stat_lines() {
        let stat = parse_stat("1234 (sleep) S 99 1234 99 0 -1 4194304 ...").unwrap();
        assert_eq!(
            stat,
            Stat {
                pid: 1234,
                state: 'S',
                ppid: 99
            }
        );
        assert!(stat.is_live());
    }

    #[test]
    fn comm_may_contain_spaces_and_parentheses() {
        let stat = parse_stat("77 (python (train) x) Z 5 77 5 0").unwrap();
        assert_eq!(
            stat,
            Stat {
                pid: 77,
                state: 'Z',
                ppid: 5
            }
        );
        assert!(!stat.is_live());
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "12",
            "12 (x)",
            "12 (x) S",
            "x (y) S 1",
            "12 (x) SS 1",
            "12 (x) S y",
        ] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sees_this_process_and_its_children() {
        let me = std::process::id();
        assert!(is_live(me));
        let stat = read_stat(me).unwrap();
        assert_eq!(stat.pid, me);
        assert!(!is_live(u32::MAX));

        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let children = live_children_of(me);
        child.kill().unwrap();
        child.wait().unwrap();
        // Other tests in this binary may run children of their own concurrently.
        assert!(children.contains(&child.id()), "{children:?}");
        assert!(!live_children_of(me).contains(&child.id()));
    }
}
