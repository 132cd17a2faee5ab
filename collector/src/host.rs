//! Host memory of the watched process tree, from `/proc`.
//!
//! Why this shape: the sampler may run at 1 kHz, so the per-tick work must be a few syscalls.
//! Finding the tree (scanning every `/proc/<pid>/stat` for parent links) is slow and runs on the
//! slow poller a few times a second; each tick then re-reads the already-open `statm` of the
//! known processes and `/proc/meminfo` with `pread` (no open/close per tick).
//!
//! RSS of a tree is the sum of its processes' resident pages: pages shared between them (e.g.
//! after `fork` of data-loader workers) count once per process, as `ps` and the OOM killer's
//! per-process view do. The same `statm` read gives the file-backed and shared part of it
//! (`shared`: memory-mapped files, libraries, shmem), so RSS splits into anonymous memory (what
//! leaks) and pages the kernel can drop (a memory-mapped dataset) at no extra cost.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Reads `/proc` files of a fixed set of processes quickly.
#[derive(Debug)]
pub struct TreeRss {
    statm: HashMap<u32, File>,
    /// Each process's resident and file-backed-or-shared bytes at the last
    /// [`TreeRss::rss_bytes`].
    last: HashMap<u32, (u64, u64)>,
    /// The tree's resident bytes at the last [`TreeRss::rss_bytes`].
    total_bytes: u64,
    /// The tree's resident file-backed and shared bytes at the last [`TreeRss::rss_bytes`].
    file_bytes: u64,
    page_bytes: u64,
    buf: Vec<u8>,
}

impl TreeRss {
    /// A reader with no processes yet.
    pub fn new() -> TreeRss {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        TreeRss {
            statm: HashMap::new(),
            last: HashMap::new(),
            total_bytes: 0,
            file_bytes: 0,
            page_bytes: u64::try_from(page).unwrap_or(4096),
            buf: vec![0; 256],
        }
    }

    /// Sets the processes to read: opens new ones, closes departed ones.
    pub fn set_pids(&mut self, pids: &[u32]) {
        self.statm.retain(|pid, _| pids.contains(pid));
        self.last.retain(|pid, _| pids.contains(pid));
        for pid in pids {
            if !self.statm.contains_key(pid)
                && let Ok(file) = File::open(format!("/proc/{pid}/statm"))
            {
                self.statm.insert(*pid, file);
            }
        }
    }

    /// Sum of resident bytes of the processes, or `None` when none could be read (all exited).
    pub fn rss_bytes(&mut self) -> Option<u64> {
        let mut total = 0u64;
        let mut file_total = 0u64;
        let mut any = false;
        let mut gone = Vec::new();
        for (pid, file) in &self.statm {
            match read_at_start(file, &mut self.buf) {
                Ok(text) => {
                    // statm: size resident shared text lib data dt (pages)
                    let mut fields = text
                        .split_ascii_whitespace()
                        .skip(1)
                        .map(|v| v.parse::<u64>().ok());
                    let pages = fields.next().flatten();
                    let shared = fields.next().flatten().unwrap_or(0);
                    match pages {
                        // A zombie (killed, not yet reaped) reads as 0 resident pages: it is gone,
                        // and its last real reading is what a post-mortem needs.
                        Some(0) | None => gone.push(*pid),
                        Some(pages) => {
                            let file = shared.min(pages) * self.page_bytes;
                            total += pages * self.page_bytes;
                            file_total += file;
                            self.last.insert(*pid, (pages * self.page_bytes, file));
                            any = true;
                        }
                    }
                }
                Err(_) => gone.push(*pid),
            }
        }
        for pid in gone {
            self.statm.remove(&pid);
            self.last.remove(&pid);
        }
        self.file_bytes = file_total;
        self.total_bytes = total;
        any.then_some(total)
    }

    /// Of the last [`TreeRss::rss_bytes`], the resident pages that are file-backed or shared
    /// memory (the rest is anonymous).
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// One process's resident bytes at the last [`TreeRss::rss_bytes`] (`None` once it is gone).
    pub fn rss_of(&self, pid: u32) -> Option<u64> {
        self.last.get(&pid).map(|&(rss, _)| rss)
    }

    /// The tree's resident and file-backed-or-shared bytes as of the last
    /// [`TreeRss::rss_bytes`], with process `pid`'s replaced by what it read of itself since
    /// (`None` when `pid` was not read then: not in the tree, or not yet).
    pub fn with_reading_of(&self, pid: u32, rss_bytes: u64, file_bytes: u64) -> Option<(u64, u64)> {
        let &(rss_then, file_then) = self.last.get(&pid)?;
        Some((
            self.total_bytes
                .saturating_sub(rss_then)
                .saturating_add(rss_bytes),
            self.file_bytes
                .saturating_sub(file_then)
                .saturating_add(file_bytes.min(rss_bytes)),
        ))
    }
}

impl Default for TreeRss {
    fn default() -> TreeRss {
        TreeRss::new()
    }
}

/// Host memory totals from `/proc/meminfo`.
#[derive(Debug)]
pub struct MemInfo {
    file: File,
    buf: Vec<u8>,
}

/// One reading of `/proc/meminfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfoReading {
    /// `MemTotal`.
    pub total_bytes: u64,
    /// `MemAvailable`.
    pub available_bytes: u64,
}

impl MemInfo {
    /// Opens `/proc/meminfo`.
    pub fn open() -> io::Result<MemInfo> {
        Ok(MemInfo {
            file: File::open("/proc/meminfo")?,
            buf: vec![0; 8192],
        })
    }

    /// Reads total and available memory.
    pub fn read(&mut self) -> Option<MemInfoReading> {
        let text = read_at_start(&self.file, &mut self.buf).ok()?;
        let mut total = None;
        let mut available = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("MemTotal:") {
                total = parse_kib(rest);
            } else if let Some(rest) = line.strip_prefix("MemAvailable:") {
                available = parse_kib(rest);
                break; // MemAvailable comes after MemTotal
            }
        }
        Some(MemInfoReading {
            total_bytes: total?,
            available_bytes: available?,
        })
    }
}

/// The last process id the kernel handed out (the last field of `/proc/loadavg`), read through
/// a kept-open file: when it changes, a process was born somewhere, maybe in the watched tree.
/// One `pread` (a few µs) instead of walking the tree's `children` files at every tick.
#[derive(Debug)]
pub struct LastPid {
    file: File,
    buf: Vec<u8>,
}

impl LastPid {
    /// Opens `/proc/loadavg`.
    pub fn open() -> io::Result<LastPid> {
        Ok(LastPid {
            file: File::open("/proc/loadavg")?,
            buf: vec![0; 128],
        })
    }

    /// The newest pid.
    pub fn read(&mut self) -> Option<u32> {
        let text = read_at_start(&self.file, &mut self.buf).ok()?;
        text.split_ascii_whitespace().last()?.parse().ok()
    }
}

fn parse_kib(text: &str) -> Option<u64> {
    let kib: u64 = text.split_ascii_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// Reads a `/proc` file from its start into `buf` (growing it when the file is larger).
fn read_at_start<'b>(file: &File, buf: &'b mut Vec<u8>) -> io::Result<&'b str> {
    loop {
        let n = file.read_at(buf, 0)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if n < buf.len() {
            return std::str::from_utf8(&buf[..n]).map_err(|_| io::ErrorKind::InvalidData.into());
        }
        let larger = buf.len() * 2;
        buf.resize(larger, 0);
    }
}

/// The process `root` and all its descendants.
///
/// Walks the tree down through `/proc/<pid>/task/<tid>/children` (Linux ≥ 3.5), which reads
/// only the tree's own files: a scan of every `/proc/*/stat` cost 11 ms a poll on a 16-core GPU
/// host (1.2% of a core at one poll a second, scripts/gpu-proof). Falls back to that scan where
/// the kernel lacks `children` files.
pub fn process_tree(root: u32) -> Vec<u32> {
    match tree_from_children_files(root) {
        Some(tree) => tree,
        None => tree_from_full_scan(root),
    }
}

/// `None` when the kernel has no `children` files (CONFIG_PROC_CHILDREN unset).
fn tree_from_children_files(root: u32) -> Option<Vec<u32>> {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let supported = *SUPPORTED.get_or_init(|| {
        let own = std::process::id();
        std::path::Path::new(&format!("/proc/{own}/task/{own}/children")).exists()
    });
    if !supported {
        return None;
    }
    let mut tree = vec![root];
    let mut seen: std::collections::HashSet<u32> = tree.iter().copied().collect();
    let mut i = 0;
    while i < tree.len() {
        let pid = tree[i];
        // Any thread may have started a child: every task's list counts.
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
                    continue;
                };
                for child in text
                    .split_ascii_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok())
                {
                    if seen.insert(child) {
                        tree.push(child);
                    }
                }
            }
        }
        i += 1;
    }
    Some(tree)
}

/// The whole-`/proc` scan: every process's parent from `/proc/*/stat`.
fn tree_from_full_scan(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = parent_of(pid) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        if let Some(kids) = children.get(&tree[i]) {
            tree.extend(kids);
        }
        i += 1;
    }
    tree
}

/// Parent pid from `/proc/<pid>/stat` (the field after the parenthesised command name, which may
/// itself contain spaces and parentheses); `None` when it is gone.
/// The shared-memory tmpfs where POSIX shared memory lives (DataLoader workers' batches).
pub const SHM_DIR: &str = "/dev/shm";

/// (bytes in use, size) of the filesystem at `path` (`statvfs`: its blocks less its free
/// blocks, in fragment-size units); `None` when it cannot be read or has no size.
pub fn filesystem_usage(path: &str) -> Option<(u64, u64)> {
    let c_path = std::ffi::CString::new(path).ok()?;
    // SAFETY: statvfs writes into the zeroed struct; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    let size = (st.f_blocks as u64).checked_mul(unit)?;
    let free = (st.f_bfree as u64).saturating_mul(unit);
    (size > 0).then(|| (size.saturating_sub(free), size))
}

pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// A process's name (`/proc/PID/comm`), empty when it is gone.
pub fn name_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default()
}

/// A process's command line (`/proc/PID/cmdline`: its arguments, each ended by a NUL). Empty when
/// it is gone.
pub fn cmdline_of(pid: u32) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()
}

/// The environment a process was started with (`/proc/PID/environ`; later changes inside the
/// process are not in it). Empty when it is gone or not ours to read.
pub fn environ_of(pid: u32) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()
}

/// What `/proc/PID/smaps_rollup` says of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollup {
    /// The process.
    pub pid: u32,
    /// Proportional set size: shared pages split among the processes that map them.
    pub pss_bytes: u64,
    /// Pages only it maps (`Private_Clean + Private_Dirty`).
    pub private_bytes: u64,
}

/// A process's resident anonymous bytes (`statm`'s resident less its shared: file-backed pages
/// and shared memory), `None` once it is gone. A page a forked child copies from its parent was
/// resident in it already, so this moves with what a process allocates, not with what it copies.
pub fn anon_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let mut fields = text.split_ascii_whitespace().skip(1).map(str::parse::<u64>);
    let (Some(Ok(resident)), Some(Ok(shared))) = (fields.next(), fields.next()) else {
        return None;
    };
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    Some(resident.saturating_sub(shared) * page)
}

/// The memory rollup of each of `pids` that could be read. PSS splits shared pages among the
/// processes that map them, so forked workers sharing their parent's memory are not counted once
/// each. Costs a page-table walk per process (17 ms for a 2 GiB process on the 2-vCPU development
/// VM, against 19 µs for `statm`), so callers read it rarely (see `sampler::poll_loop`).
pub fn tree_rollups(pids: &[u32]) -> Vec<Rollup> {
    let kib = |text: &str, key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k * 1024)
    };
    pids.iter()
        .filter_map(|&pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
            text.contains("Pss:").then(|| Rollup {
                pid,
                pss_bytes: kib(&text, "Pss:"),
                private_bytes: kib(&text, "Private_Clean:") + kib(&text, "Private_Dirty:"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forked_children_share_pages_that_pss_counts_once() {
        // The parent touches 64 MiB, then forks two children that only sleep: summed RSS counts
        // the 64 MiB three times, PSS once.
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let mut children = Vec::new();
        for _ in 0..2 {
            // SAFETY: the child only sleeps and exits; no locks are taken after fork.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: async-signal-safe calls only.
                unsafe {
                    libc::sleep(3);
                    libc::_exit(0);
                }
            }
            children.push(pid as u32);
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let me = std::process::id();
        let pids = [me, children[0], children[1]];
        let mut rss = TreeRss::new();
        rss.set_pids(&pids);
        let summed = rss.rss_bytes().unwrap();
        let pss: u64 = tree_rollups(&pids).iter().map(|r| r.pss_bytes).sum();
        assert!(summed >= 3 * (60 << 20), "{summed}");
        assert!(pss < summed - (100 << 20), "pss {pss} summed {summed}");
        assert!(pss >= 60 << 20, "{pss}");
        drop(block);
        for pid in children {
            // SAFETY: plain kill/waitpid on our own children.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
                libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
            }
        }
    }

    #[test]
    fn reads_own_rss_and_meminfo() {
        let me = std::process::id();
        let mut rss = TreeRss::new();
        rss.set_pids(&[me]);
        let first = rss.rss_bytes().unwrap();
        assert!(first > 1 << 20, "{first}");
        // Touch 64 MiB: RSS must follow (read through the same open file).
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let second = rss.rss_bytes().unwrap();
        assert!(second >= first + (60 << 20), "{first} -> {second}");
        drop(block);
        let mut mem = MemInfo::open().unwrap();
        let m = mem.read().unwrap();
        assert!(m.total_bytes > m.available_bytes && m.available_bytes > 0);
    }

    #[test]
    fn the_children_files_and_the_full_scan_find_the_same_tree() {
        // A grandchild too: sh starts sleep.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5; wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let me = std::process::id();
        let mut walked = tree_from_children_files(me).expect("Linux has children files");
        let mut scanned = tree_from_full_scan(me);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(walked.len() >= 4, "{walked:?}"); // me, sh, two sleeps
        walked.sort_unstable();
        scanned.sort_unstable();
        assert_eq!(walked, scanned);
    }

    #[test]
    fn finds_children_in_the_tree() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let tree = process_tree(std::process::id());
        assert!(tree.contains(&child.id()), "{tree:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        let mut rss = TreeRss::new();
        rss.set_pids(&[child.id()]);
        assert_eq!(rss.rss_bytes(), None, "an exited process has no RSS");
    }
}
