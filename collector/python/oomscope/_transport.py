"""How a message reaches the collector: a ring of shared memory, else a datagram, kept and retried
while the socket's queue is full, and started over in a forked child.

Why each piece:
- the ring (docs/protocol.md, "Rings"; the collector's run/inbox/rings.rs): a datagram costs its
  sender a system call (10-30 us inside a training loop on a small VM), a ring write none. Only
  where stores are seen by other CPUs in program order (x86-64): the writer's position must not
  be seen before the bytes it covers, and Python has no memory barrier.
- the datagram: the kernel queues only a few per Unix socket (`net.unix.max_dgram_qlen`, often
  10) and the collector reads every 2 ms; a send that fails keeps its message (up to
  `MAX_PENDING`), and what is kept goes out in one datagram `RETRY_US` after the failure.
- never blocking, never raising: a message the collector cannot take is dropped and counted.

This module knows nothing of the protocol's verbs (the probe formats them) and imports nothing
of oomscope.
"""

import itertools
import mmap
import os
import socket
import struct
import threading
import time

# Messages kept while the collector's socket queue is full, sent with the next message.
MAX_PENDING = 64
RETRY_US = 1000

RING_MAGIC = b"OOMRING1"
RING_HEADER_BYTES = 64
RING_DATA_BYTES = 256 << 10
RING_MAX_MESSAGE_BYTES = 64 << 10
RING_MACHINES = ("x86_64",)  # (32-bit x86 would store a u64 position in two halves)
# A ring not announced (the socket's queue full: other processes flooding it) is tried again
# this much later, up to this many times.
RING_RETRY_US = 10000
RING_TRIES = 20
_ring_serial = itertools.count(1)  # names rings apart: several transports of one process
_U32 = struct.Struct("<I")
_write_u32 = _U32.pack_into


def ring_line(name):
    """`ring <name>`: the announcement of a ring made in the socket's directory."""
    return "ring " + name


def now_us():
    """CLOCK_MONOTONIC in microseconds: the clock the collector reads `at` lines on."""
    return time.monotonic_ns() // 1000


class Transport:
    """One process's way to the collector listening at `path` (None: disabled, every send returns
    at once)."""

    def __init__(self, path):
        self.path = path
        self.dropped = 0
        self._pending = []
        self._failed_us = 0  # when a send last failed (CLOCK_MONOTONIC, us)
        self._sock = None
        self._connected = False
        self._forget_ring()
        if not path:
            return
        try:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        except OSError:
            self._sock = None
            return
        # Connected once, a send skips the kernel's lookup of the socket's path that every
        # `sendto` makes (~5 us of a mark's ~20 on a 2-core VM); `sendto` when it fails.
        try:
            self._sock.connect(path)
            self._connected = True
        except OSError:
            pass

    @property
    def enabled(self):
        return self._sock is not None

    def after_fork(self):
        """In a forked child: the parent's ring and pending messages are the parent's (the child
        makes its own ring at its first message; the socket is shared, as datagrams allow)."""
        self._pending = []
        self._forget_ring()

    def close(self):
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    # --- sending ---------------------------------------------------------------------------------

    def send(self, text, now, urgent=False):
        """Sends one message (protocol lines, `at` first), or keeps it while the socket's queue is
        full; `urgent` (an OOM: the program may be about to die) tries at once."""
        if self._pending and now - self._failed_us < RETRY_US and not urgent:
            self._pending.append(text)
            if len(self._pending) > MAX_PENDING:
                self.dropped += 1
                del self._pending[0]
            return
        texts = self._pending + [text] if self._pending else [text]
        if self._deliver("\n".join(texts) if self._pending else text, now):
            self._pending = []
            return
        self._failed_us = now
        if len(texts) > MAX_PENDING:
            self.dropped += len(texts) - MAX_PENDING
            texts = texts[-MAX_PENDING:]
        self._pending = texts

    def send_fast(self, text, now):
        """`send` for the common case of a loop's marks: straight into the ring when nothing is
        pending (one call less a mark: each cost ~1 us in a training loop)."""
        if self._pending or not self.ring_write(text.encode(), now):
            self.send(text, now)

    def _deliver(self, text, now):
        """Puts one message into the ring, else sends it as a datagram; False when neither could
        take it."""
        data = text.encode("utf-8", "replace")
        if self.ring_write(data, now):
            return True
        try:
            if self._connected:
                self._sock.send(data)
            else:
                self._sock.sendto(data, self.path)
            return True
        except OSError:
            return False

    def flush(self, tries=100):
        """Sends what is still pending; at exit, waiting up to ~0.1 s for the collector to make
        room (the program is ending: a moment's wait costs it nothing). What cannot be sent is
        counted as dropped."""
        for _ in range(tries):
            if not self._pending or self._sock is None:
                return
            # Each pending message has its own `at`: sent together, counted one by one if not.
            if self._deliver("\n".join(self._pending), now_us()):
                self._pending = []
                return
            time.sleep(0.001)
        self.dropped += len(self._pending)
        self._pending = []

    # --- the ring --------------------------------------------------------------------------------

    def _forget_ring(self):
        self._ring = None
        # The header as native u64 words: a word is stored in one instruction (x86-64), which
        # the collector may read at any moment; struct's "<Q" writes it byte by byte, and the
        # collector read torn positions (8 senders marking at once).
        self._ring_words = None
        self._ring_pos = 0
        self._ring_bytes = RING_DATA_BYTES
        self._ring_tries = 0
        self._ring_retry_us = 0
        self._ring_lock = threading.Lock()

    def _open_ring(self, now):
        """Makes this process's ring in the socket's directory and announces it (`ring <name>`);
        None where that cannot be done (then datagrams; tried again `RING_RETRY_US` later)."""
        self._ring_tries += 1
        self._ring_retry_us = now + RING_RETRY_US
        if (self._sock is None or not self._connected or os.uname().machine not in RING_MACHINES
                or os.environ.get("OOMSCOPE_RING") == "0"):
            self._ring_tries = RING_TRIES
            return None
        name = "ring-%d-%d" % (os.getpid(), next(_ring_serial))
        path = os.path.join(os.path.dirname(self.path), name)
        size = RING_DATA_BYTES - RING_DATA_BYTES % 8
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return None
        ring = None
        try:
            try:
                os.ftruncate(fd, RING_HEADER_BYTES + size)
                ring = mmap.mmap(fd, RING_HEADER_BYTES + size)
            finally:
                os.close(fd)
            ring[0:len(RING_MAGIC)] = RING_MAGIC
            words = memoryview(ring).cast("Q")
            try:
                self._sock.send(ring_line(name).encode())
            except OSError:
                words.release()
                raise
        except (OSError, ValueError, TypeError):
            # Not announced (a full queue, most likely): no one will read it.
            if ring is not None:
                ring.close()
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        self._ring = ring
        self._ring_words = words
        self._ring_pos = 0
        self._ring_bytes = size
        return ring

    def ring_write(self, data, now=0):
        """Writes one message into the ring; False when it cannot (no ring, no room, too long, or
        another thread, a signal handler or a garbage-collection callback is writing), and the
        caller sends a datagram. Written for speed: a mark's share of the hooks' cost."""
        if self._ring is None and (self._ring_tries >= RING_TRIES or now < self._ring_retry_us):
            return False
        n = len(data)
        if n > RING_MAX_MESSAGE_BYTES or not self._ring_lock.acquire(False):
            return False
        try:
            ring = self._ring
            if ring is None:
                # Under the lock: a collection's callback sending from inside it makes no second.
                ring = self._open_ring(now)
                if ring is None:
                    return False
            pos = self._ring_pos
            size = self._ring_bytes
            words = self._ring_words
            if n + 4 > size - pos + words[2]:
                return False
            at = pos % size
            if at + n + 4 <= size:
                start = RING_HEADER_BYTES + at
                _write_u32(ring, start, n)
                ring[start + 4:start + 4 + n] = data
            else:  # straddles the end: the length too, maybe
                record = _U32.pack(n) + data
                first = size - at
                ring[RING_HEADER_BYTES + at:RING_HEADER_BYTES + size] = record[:first]
                ring[RING_HEADER_BYTES:RING_HEADER_BYTES + n + 4 - first] = record[first:]
            pos += n + 4
            self._ring_pos = pos
            # After the bytes it covers: the collector reads up to it.
            words[1] = pos
            return True
        except (ValueError, TypeError):
            return False
        finally:
            self._ring_lock.release()
