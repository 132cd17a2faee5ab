//! The marker socket: a Unix datagram socket in a private directory, drained by the sampler
//! thread between ticks through the [`super::Inbox`] (so that a reading can be taken the moment
//! a mark arrives).
//!
//! The directory is created with mode 0700 and the socket chmod-ed to 0600, so only the user who
//! runs the collector can send marks. The receive buffer is enlarged so that bursts of marks are
//! absorbed by the kernel; if the recorder still falls behind, messages are dropped and counted,
//! never queued without bound — and the sender, whose socket is non-blocking, never waits.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::run::shared_state::RunState;
use oomscope_format::protocol::{Message, parse_datagram};

/// Kernel receive buffer asked for (the kernel may cap it at `net.core.rmem_max`).
const RECEIVE_BUFFER_BYTES: libc::c_int = 8 << 20;

/// One datagram read: its length and its sender's pid (kernel-verified), when the kernel said.
#[derive(Debug, Clone, Copy)]
pub struct Datagram {
    /// Bytes read.
    pub len: usize,
    /// The sending process.
    pub sender: Option<u32>,
}

/// The bound socket and its private directory (removed on drop).
#[derive(Debug)]
pub struct MarkerSocket {
    socket: UnixDatagram,
    dir: PathBuf,
    path: PathBuf,
}

impl MarkerSocket {
    /// Creates the private directory and binds the socket in it.
    pub fn bind() -> Result<MarkerSocket> {
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!(
            "oomscope-{}-{:x}",
            std::process::id(),
            random_suffix()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create the marker directory {}", dir.display()))?;
        let path = dir.join("markers.sock");
        let socket = UnixDatagram::bind(&path)
            .with_context(|| format!("cannot bind the marker socket {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        socket.set_nonblocking(true)?;
        let size = RECEIVE_BUFFER_BYTES;
        // SAFETY: setsockopt on a valid socket with a correctly sized int option.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const size).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on a valid socket with a correctly sized int option. With
        // SO_PASSCRED every datagram carries its sender's credentials, checked by the kernel.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&raw const on).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Ok(MarkerSocket { socket, dir, path })
    }

    /// The run's private directory (mode 0700; removed with everything in it when the run ends).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The socket path to export as `OOMSCOPE_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits up to `timeout` for a datagram and reads it into `buf`; `None` when none came.
    /// `ppoll` gives microsecond timeouts, which a 1 kHz schedule needs. The datagram's length
    /// comes with its sender's pid as the kernel states it (in this collector's pid namespace),
    /// whatever the message says.
    pub fn recv_within(&self, timeout: Duration, buf: &mut [u8]) -> Option<Datagram> {
        let mut fd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let spec = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask change.
        let ready = unsafe { libc::ppoll(&raw mut fd, 1, &raw const spec, std::ptr::null()) };
        if ready <= 0 {
            return None;
        }
        self.recv_with_sender(buf)
    }

    /// One `recvmsg` with room for an `SCM_CREDENTIALS` control message.
    fn recv_with_sender(&self, buf: &mut [u8]) -> Option<Datagram> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // Room for one ucred control message, aligned as cmsghdr needs.
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain data; zeroed is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&control) as _;
        // SAFETY: the iovec and the control buffer outlive the call and match their lengths.
        let n = unsafe { libc::recvmsg(self.socket.as_raw_fd(), &raw mut msg, 0) };
        let len = usize::try_from(n).ok()?;
        let mut sender = None;
        // SAFETY: walking the control messages the kernel wrote into `control`, with the
        // libc macros that bound each header by msg_controllen.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET
                    && (*cmsg).cmsg_type == libc::SCM_CREDENTIALS
                {
                    let cred =
                        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::ucred>());
                    sender = u32::try_from(cred.pid).ok().filter(|p| *p != 0);
                }
                cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
            }
        }
        Some(Datagram { len, sender })
    }

    /// Parses a datagram into its messages, counting lines that are not messages.
    pub fn parse(datagram: &[u8], state: &RunState) -> Vec<Message> {
        // Valid UTF-8 (every helper's) is checked by `from_utf8`'s fast path; the lossy
        // decoder's byte-by-byte walk was ~5% of the collector's CPU for a flood of marks.
        let (messages, rejected) = match std::str::from_utf8(datagram) {
            Ok(text) => parse_datagram(text),
            Err(_) => parse_datagram(&String::from_utf8_lossy(datagram)),
        };
        if rejected > 0 {
            state
                .rejected_lines
                .fetch_add(rejected as u64, Ordering::Relaxed);
        }
        messages
    }
}

impl Drop for MarkerSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A per-run random suffix for the directory name (not security: the directory's mode is).
fn random_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}
