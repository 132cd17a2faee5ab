//! Marks without a system call each: a Python process that marks writes its messages into a ring
//! of shared memory (a file in the run's private directory, mapped by both sides) and announces it
//! once on the marker socket (`ring <name>`); the sampler reads every ring when it drains the
//! socket, every 2 ms.
//!
//! Why: inside a training loop a datagram costs the sender 10–30 µs on a small VM (a mark every
//! stage, six a step: most of the hooks' cost per step), a store into mapped memory well under
//! one. What is written is in memory the collector maps, so it survives a SIGKILL of the sender
//! exactly as a queued datagram does. The sender falls back to a datagram whenever a message does
//! not fit (a full ring), and a process that cannot make a ring sends datagrams throughout.
//!
//! Layout (little-endian; docs/protocol.md, "Rings"): a 64-byte header — the magic `OOMRING1`,
//! then at byte 8 the writer's position and at byte 16 the reader's, both counts of bytes written
//! since the start, never wrapped — and the data area after it. A message is a `u32` length and
//! that many bytes of protocol lines (what one datagram would carry), written at
//! `position % capacity` and wrapping at the data area's end. The writer stores its position only
//! after the bytes it covers (x86-64 keeps stores in program order; the Python helper makes rings
//! only there), the reader stores its own after reading, and each side writes only its own.
//!
//! A limit: a ring file cut shorter while mapped would fault the reader (SIGBUS). Only the helper
//! writes these files, in a directory only the user can enter, and it never shortens one.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;
use oomscope_format::protocol::MAX_DATAGRAM_BYTES;

/// What a ring's file starts with.
pub const RING_MAGIC: &[u8; 8] = b"OOMRING1";
/// Bytes before the data area.
pub const RING_HEADER_BYTES: usize = 64;
/// Where the writer's position is kept.
const WRITE_POSITION_AT: usize = 8;
/// Where the reader's position is kept.
const READ_POSITION_AT: usize = 16;
/// The smallest and largest data area accepted (the helper makes 256 KiB).
const MIN_CAPACITY_BYTES: usize = 1 << 10;
const MAX_CAPACITY_BYTES: usize = 64 << 20;
/// Rings read at once; an announcement beyond them is ignored (and its sender's messages with
/// it): each process that marks makes one, and the ring of a process that has exited is let go
/// once read (see [`MarkRing::sender_gone`]), so only processes alive together count.
pub const MAX_RINGS: usize = 1024;

/// One sender's ring, mapped.
#[derive(Debug)]
pub struct MarkRing {
    map: MmapRaw,
    path: PathBuf,
    capacity: u64,
    read: u64,
    /// The process that announced it (as the kernel stated it).
    pub sender: u32,
}

/// Why a ring was not opened, or was given up.
#[derive(Debug, PartialEq, Eq)]
pub enum RingError {
    /// Not a ring's name (`ring-` and letters, digits, `-`, `.` and `_` only).
    Name,
    /// Could not be opened or mapped.
    Open,
    /// Not a ring's size or magic.
    NotARing,
    /// Its positions or a length cannot be right: the ring is read no further.
    Corrupt,
}

impl MarkRing {
    /// Maps the ring `name` in `dir` (the run's private directory), announced by `sender`.
    pub fn open(dir: &Path, name: &str, sender: u32) -> Result<MarkRing, RingError> {
        let plain = name.strip_prefix("ring-").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        });
        if !plain {
            return Err(RingError::Name);
        }
        let path = dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|_| RingError::Open)?;
        let map = MmapRaw::map_raw(&file).map_err(|_| RingError::Open)?;
        let capacity = map.len().saturating_sub(RING_HEADER_BYTES);
        if !(MIN_CAPACITY_BYTES..=MAX_CAPACITY_BYTES).contains(&capacity) {
            return Err(RingError::NotARing);
        }
        let mut magic = [0u8; 8];
        // SAFETY: the map is at least RING_HEADER_BYTES long; a byte copy out of shared memory.
        unsafe { std::ptr::copy_nonoverlapping(map.as_ptr(), magic.as_mut_ptr(), 8) };
        if &magic != RING_MAGIC {
            return Err(RingError::NotARing);
        }
        let mut ring = MarkRing {
            map,
            path,
            capacity: capacity as u64,
            read: 0,
            sender,
        };
        // A writer that had written before the announcement was read starts where it started.
        ring.read = ring.position(READ_POSITION_AT).load(Ordering::Acquire);
        Ok(ring)
    }

    /// The header's position at `at` (8-aligned in a page-aligned map).
    fn position(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` + 8 is within the header; the map is page-aligned, so the address is
        // 8-aligned; both processes access it only as a whole u64 (the reader atomically).
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(at).cast()) }
    }

    /// Copies `len` bytes from data position `from` (wrapping) into `out`.
    fn copy_out(&self, from: u64, out: &mut [u8]) {
        let start = (from % self.capacity) as usize;
        let first = out.len().min(self.capacity as usize - start);
        // SAFETY: both ranges are within the data area (start + first <= capacity; the rest
        // from its start, out.len() <= capacity); the writer does not touch bytes before its
        // published position, which these are.
        unsafe {
            let data = self.map.as_ptr().add(RING_HEADER_BYTES);
            std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }

    /// How far the writer has written: what a drain reads up to (at most one ring's worth, however
    /// fast the writer goes on).
    pub fn written(&self) -> u64 {
        self.position(WRITE_POSITION_AT).load(Ordering::Acquire)
    }

    /// Copies the next message written before `written` (from [`MarkRing::written`]) into `out`
    /// and returns its length; `Ok(None)` when there is none. The reader's position is published
    /// by [`MarkRing::release`].
    pub fn next(&mut self, written: u64, out: &mut [u8]) -> Result<Option<usize>, RingError> {
        let waiting = written.wrapping_sub(self.read);
        if waiting == 0 {
            return Ok(None);
        }
        if written < self.read || waiting > self.capacity || waiting < 4 {
            return Err(RingError::Corrupt);
        }
        let mut len = [0u8; 4];
        self.copy_out(self.read, &mut len);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_DATAGRAM_BYTES.min(out.len()) || len as u64 + 4 > waiting {
            return Err(RingError::Corrupt);
        }
        self.copy_out(self.read + 4, &mut out[..len]);
        self.read += 4 + len as u64;
        Ok(Some(len))
    }

    /// Tells the writer how far this side has read (its room to write again).
    pub fn release(&self) {
        self.position(READ_POSITION_AT)
            .store(self.read, Ordering::Release);
    }

    /// The process that announced it has exited (no such process now): what it wrote is all
    /// there will be. A pid reused since reads as alive, which only keeps the ring longer.
    pub fn sender_gone(&self) -> bool {
        let Ok(pid) = libc::pid_t::try_from(self.sender) else {
            return false;
        };
        // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
}

impl Drop for MarkRing {
    /// The file goes with the mapping (the run's directory is removed at its end anyway).
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The helper's writer, in Rust: what `oomscope.Probe` does in Python.
    struct Writer {
        map: MmapRaw,
        capacity: u64,
        position: u64,
    }

    impl Writer {
        fn create(dir: &Path, name: &str, capacity: usize) -> Writer {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(dir.join(name))
                .unwrap();
            file.set_len((RING_HEADER_BYTES + capacity) as u64).unwrap();
            let map = MmapRaw::map_raw(&file).unwrap();
            // SAFETY: the header is within the map.
            unsafe { std::ptr::copy_nonoverlapping(RING_MAGIC.as_ptr(), map.as_mut_ptr(), 8) };
            Writer {
                map,
                capacity: capacity as u64,
                position: 0,
            }
        }

        fn header(&self, at: usize) -> u64 {
            // SAFETY: within the header, 8-aligned.
            unsafe { std::ptr::read_volatile(self.map.as_ptr().add(at).cast::<u64>()) }
        }

        fn set_header(&self, at: usize, value: u64) {
            // SAFETY: within the header, 8-aligned.
            unsafe { std::ptr::write_volatile(self.map.as_mut_ptr().add(at).cast::<u64>(), value) }
        }

        /// False when it does not fit (the helper then sends a datagram).
        fn write(&mut self, message: &[u8]) -> bool {
            let read = self.header(READ_POSITION_AT);
            let record: Vec<u8> = (message.len() as u32)
                .to_le_bytes()
                .into_iter()
                .chain(message.iter().copied())
                .collect();
            if record.len() as u64 > self.capacity - (self.position - read) {
                return false;
            }
            for (i, byte) in record.iter().enumerate() {
                let at = (self.position + i as u64) % self.capacity;
                // SAFETY: within the data area.
                unsafe {
                    *self.map.as_mut_ptr().add(RING_HEADER_BYTES + at as usize) = *byte;
                }
            }
            self.position += record.len() as u64;
            self.set_header(WRITE_POSITION_AT, self.position);
            true
        }
    }

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("oomscope-ring-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn read_all(ring: &mut MarkRing) -> Vec<String> {
        let mut out = vec![0u8; MAX_DATAGRAM_BYTES];
        let mut got = Vec::new();
        let written = ring.written();
        while let Some(len) = ring.next(written, &mut out).unwrap() {
            got.push(String::from_utf8(out[..len].to_vec()).unwrap());
        }
        ring.release();
        got
    }

    #[test]
    fn messages_come_out_in_order_across_the_wrap_and_a_full_ring_refuses_until_read() {
        let dir = dir("wrap");
        let mut writer = Writer::create(&dir, "ring-42-1", 1024);
        let mut ring = MarkRing::open(&dir, "ring-42-1", 42).unwrap();
        assert_eq!(read_all(&mut ring), Vec::<String>::new());
        let mut sent = Vec::new();
        let mut refused = 0;
        for round in 0..40 {
            // 7 messages of 3 + 40 bytes: some straddle the data area's end, length included.
            for i in 0..7 {
                let message = format!("at {round:03}\nmark stage_{i} step={round:020}");
                if writer.write(message.as_bytes()) {
                    sent.push(message);
                } else {
                    refused += 1;
                }
            }
            if round % 3 == 2 {
                let got = read_all(&mut ring);
                let expected = std::mem::take(&mut sent);
                assert_eq!(got, expected, "round {round}");
            }
        }
        assert!(
            refused > 0,
            "a full ring refuses a message until it is read"
        );
        assert_eq!(read_all(&mut ring), sent);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_ring_whose_sender_exited_says_so_and_its_file_goes_with_it() {
        let dir = dir("gone");
        let _writer = Writer::create(&dir, "ring-1-1", 1024);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let ring = MarkRing::open(&dir, "ring-1-1", pid).unwrap();
        assert!(ring.sender_gone(), "pid {pid} was reaped");
        let mine = MarkRing::open(&dir, "ring-1-1", std::process::id()).unwrap();
        assert!(!mine.sender_gone());
        drop(ring);
        assert!(!dir.join("ring-1-1").exists());
        drop(mine);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_outside_the_directory_files_that_are_no_ring_and_broken_positions_are_refused() {
        let dir = dir("refuse");
        for name in ["../x", "ring-", "ring-a/b", "sock", "ring-\u{e9}"] {
            assert_eq!(
                MarkRing::open(&dir, name, 1).unwrap_err(),
                RingError::Name,
                "{name}"
            );
        }
        assert_eq!(
            MarkRing::open(&dir, "ring-missing", 1).unwrap_err(),
            RingError::Open
        );
        std::fs::write(dir.join("ring-small"), [0u8; 100]).unwrap();
        assert_eq!(
            MarkRing::open(&dir, "ring-small", 1).unwrap_err(),
            RingError::NotARing
        );
        std::fs::write(dir.join("ring-nomagic"), vec![0u8; 4096]).unwrap();
        assert_eq!(
            MarkRing::open(&dir, "ring-nomagic", 1).unwrap_err(),
            RingError::NotARing
        );
        let writer = Writer::create(&dir, "ring-7", 1024);
        let mut ring = MarkRing::open(&dir, "ring-7", 7).unwrap();
        let mut out = vec![0u8; MAX_DATAGRAM_BYTES];
        // A writer's position beyond a whole ring, then a length longer than what was written.
        writer.set_header(WRITE_POSITION_AT, 5000);
        assert_eq!(ring.next(ring.written(), &mut out), Err(RingError::Corrupt));
        writer.set_header(WRITE_POSITION_AT, 8);
        // SAFETY: the data area's first bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                500u32.to_le_bytes().as_ptr(),
                writer.map.as_mut_ptr().add(RING_HEADER_BYTES),
                4,
            );
        }
        assert_eq!(ring.next(ring.written(), &mut out), Err(RingError::Corrupt));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
