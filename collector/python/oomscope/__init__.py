"""oomscope marker client for Python training scripts.

Dependency-free. `pip install` of the oomscope wheel installs it with the `collector` command;
under `collector run` it is importable without installing anything. Outside `collector run` (no
OOMSCOPE_SOCKET in the environment) every call returns immediately and sends nothing.

    import oomscope as oom
    for step, batch in enumerate(loader):
        oom.step(step)
        oom.mark("pre_forward")
        loss = model(batch)
        oom.mark("post_forward")
        loss.backward()
        oom.mark("post_backward")
        opt.step(); opt.zero_grad()
        oom.mark("post_optimizer_step")

Under `collector run` the collector's bootstrap directory is first on PYTHONPATH (so the module
is always the collector's own version, and `import oomscope_probe`, its former name, still works),
and PyTorch programs get stage marks without any code at all (the zero-code hooks); marks sent from here add to those, and a stage marked here is no longer marked
by the hooks. When torch is already imported and CUDA is initialised, every mark carries the
caching allocator's statistics (read straight from torch._C._cuda_memoryStats), so the stage
table shows allocated, reserved and peak memory exactly as PyTorch sees them. Sends never block: if the collector
cannot keep up, the message is dropped and counted in `Probe.dropped`. On x86-64 the messages go
into a ring of shared memory the collector maps (no system call a message; docs/protocol.md,
"Rings"), datagrams otherwise and whenever the ring is full.

The wire format is the oomscope marker protocol, version 1 (docs/protocol.md).
"""

import atexit
import itertools
import mmap
import os
import socket
import struct
import sys
import threading
import time

# The collector's version (`collector --version`; a test holds them equal).
__version__ = "0.1.0"

PROTOCOL_VERSION = 1
# Lines kept while the collector's socket queue is full, sent with the next message.
_MAX_PENDING = 64
_RETRY_US = 1000
# A mark this soon after the sender's last reading of itself carries none: the collector takes no
# reading closer than this to the last one (`MIN_MARK_READING_GAP_US`; a test holds them equal), so
# it would be thrown away.
_READING_GAP_US = 200

# The ring of shared memory (docs/protocol.md, "Rings"; the collector's run/mark_rings.rs). Only
# where stores are seen by other CPUs in program order: the writer's position must not be seen
# before the bytes it covers, and Python has no memory barrier.
_RING_MAGIC = b"OOMRING1"
_RING_HEADER_BYTES = 64
_RING_DATA_BYTES = 256 << 10
_RING_MAX_MESSAGE_BYTES = 64 << 10
_RING_MACHINES = ("x86_64",)  # (32-bit x86 would store a u64 position in two halves)
# A ring not announced (the socket's queue full: other processes flooding it) is tried again
# this much later, up to this many times.
_RING_RETRY_US = 10000
_RING_TRIES = 20
_ring_serial = itertools.count(1)  # names rings apart: several probes of one process make one each
_U32 = struct.Struct("<I")
_write_u32 = _U32.pack_into

# Paths in the allocator's nested statistics (torch._C._cuda_memoryStats) -> protocol fields. The
# nested dict is what memory_stats() flattens; reading it directly costs ~24 us a mark instead of
# ~118 us (measured on an H100 with torch 2.11, scripts/gpu-proof).
_STAT_FIELDS = (
    (("allocated_bytes", "all", "current"), "allocated_bytes"),
    (("reserved_bytes", "all", "current"), "reserved_bytes"),
    (("active_bytes", "all", "current"), "active_bytes"),
    (("inactive_split_bytes", "all", "current"), "inactive_split_bytes"),
    (("allocated_bytes", "all", "peak"), "peak_allocated_bytes"),
    (("reserved_bytes", "all", "peak"), "peak_reserved_bytes"),
    (("num_alloc_retries",), "num_alloc_retries"),
    (("num_ooms",), "num_ooms"),
)


def _lookup(stats, path):
    for key in path:
        if not isinstance(stats, dict) or key not in stats:
            return None
        stats = stats[key]
    return stats


# The launchers' names for a process's place in the job, in order of precedence: the same lists
# as `oomscope_collector::launch_env` (a test holds them equal).
_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_WORLD_SIZE_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_ATTEMPT_VARS = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")


def _first_number(names):
    for name in names:
        try:
            return int(os.environ[name])
        except (KeyError, ValueError):
            continue
    return None


def _identity():
    """This process's place in a distributed job, as its environment says now (launchers that set
    the rank inside the process, like DeepSpeed's MPI path or Ray, are seen too)."""
    return (("rank", _first_number(_RANK_VARS)),
            ("local_rank", _first_number(_LOCAL_RANK_VARS)),
            ("world_size", _first_number(_WORLD_SIZE_VARS)),
            ("restart", _first_number(_ATTEMPT_VARS)))


def _rank():
    """This process's distributed rank (RANK, SLURM_PROCID, ...), or None."""
    return _identity()[0][1]


def _token(text):
    """Stage and tensor names are single tokens: whitespace becomes '_'."""
    return "_".join(str(text).split()) or "_"


class Probe:
    """A connection to the collector watching this process (or none)."""

    def __init__(self, path=None, torch_stats=True):
        self.path = path if path is not None else os.environ.get("OOMSCOPE_SOCKET")
        version = os.environ.get("OOMSCOPE_PROTOCOL", str(PROTOCOL_VERSION))
        if version != str(PROTOCOL_VERSION):
            self.path = None
        self.torch_stats = torch_stats
        self.rank = _rank()
        # getpid() is a system call each time (glibc no longer caches it): kept, and renewed in a
        # forked child.
        self._pid = os.getpid()
        self.group = None
        self._announced = self.rank is None
        self._who = self._who_fields()
        self.dropped = 0
        self._pending = []
        self._failed_us = 0  # when a send last failed (CLOCK_MONOTONIC, us)
        self._sock = None
        if self.path:
            try:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
                atexit.register(self.flush)
            except OSError:
                self._sock = None
        self._statm = None  # /proc/self/statm, opened at the first mark (again after a fork)
        self._read_us = 0  # when it was last read
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._forget_ring()
        if self._sock is not None and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)
        self._connected = False
        if self._sock is not None:
            # Connected once, a send skips the kernel's lookup of the socket's path that every
            # `sendto` makes (~5 us of a mark's ~20 on a 2-core VM); `sendto` when it fails.
            try:
                self._sock.connect(self.path)
                self._connected = True
            except OSError:
                pass

    @property
    def enabled(self):
        return self._sock is not None

    def _after_fork(self):
        self._pid = os.getpid()
        self._who = self._who_fields()
        # The file was opened as /proc/self of the parent: it would read the parent's memory.
        if self._statm is not None:
            try:
                os.close(self._statm)
            except OSError:
                pass
        self._statm = None
        self._read_us = 0
        # The parent's ring is the parent's: the child makes its own at its first message.
        self._forget_ring()

    def _forget_ring(self):
        self._ring = None
        # The header as native u64 words: a word is stored in one instruction (x86-64), which
        # the collector may read at any moment; struct's "<Q" writes it byte by byte, and the
        # collector read torn positions (8 senders marking at once).
        self._ring_words = None
        self._ring_pos = 0
        self._ring_bytes = _RING_DATA_BYTES
        self._ring_tries = 0
        self._ring_retry_us = 0
        self._ring_lock = threading.Lock()

    def _open_ring(self, now_us):
        """Makes this process's ring in the socket's directory and announces it; None where that
        cannot be done (the messages then go as datagrams; tried again `_RING_RETRY_US` later)."""
        self._ring_tries += 1
        self._ring_retry_us = now_us + _RING_RETRY_US
        if (self._sock is None or not self._connected or os.uname().machine not in _RING_MACHINES
                or os.environ.get("OOMSCOPE_RING") == "0"):
            self._ring_tries = _RING_TRIES
            return None
        name = "ring-%d-%d" % (self._pid, next(_ring_serial))
        path = os.path.join(os.path.dirname(self.path), name)
        size = _RING_DATA_BYTES - _RING_DATA_BYTES % 8
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return None
        ring = None
        try:
            try:
                os.ftruncate(fd, _RING_HEADER_BYTES + size)
                ring = mmap.mmap(fd, _RING_HEADER_BYTES + size)
            finally:
                os.close(fd)
            ring[0:len(_RING_MAGIC)] = _RING_MAGIC
            words = memoryview(ring).cast("Q")
            try:
                self._sock.send(self._ring_line(name).encode())
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

    @staticmethod
    def _ring_line(name):
        """`ring`: the announcement of a ring made in the socket's directory."""
        return "ring " + _token(name)

    def _ring_write(self, data, now_us=0):
        """Writes one message into the ring; False when it cannot (no ring, no room, too long, or
        another thread or a signal handler, or a garbage-collection callback, is writing), and
        the caller sends a datagram. Written for speed: a mark's share of the hooks' cost."""
        if self._ring is None and (self._ring_tries >= _RING_TRIES or now_us < self._ring_retry_us):
            return False
        n = len(data)
        if n > _RING_MAX_MESSAGE_BYTES or not self._ring_lock.acquire(False):
            return False
        try:
            ring = self._ring
            if ring is None:
                # Under the lock: a collection's callback sending from inside it makes no second.
                ring = self._open_ring(now_us)
                if ring is None:
                    return False
            pos = self._ring_pos
            size = self._ring_bytes
            words = self._ring_words
            if n + 4 > size - pos + words[2]:
                return False
            at = pos % size
            if at + n + 4 <= size:
                start = _RING_HEADER_BYTES + at
                _write_u32(ring, start, n)
                ring[start + 4:start + 4 + n] = data
            else:  # straddles the end: the length too, maybe
                record = _U32.pack(n) + data
                first = size - at
                ring[_RING_HEADER_BYTES + at:_RING_HEADER_BYTES + size] = record[:first]
                ring[_RING_HEADER_BYTES:_RING_HEADER_BYTES + n + 4 - first] = record[first:]
            pos += n + 4
            self._ring_pos = pos
            # After the bytes it covers: the collector reads up to it.
            words[1] = pos
            return True
        except (ValueError, TypeError):
            return False
        finally:
            self._ring_lock.release()

    def _at_line(self, memory=False, now_us=None):
        """`at`: when the message after it happened (CLOCK_MONOTONIC, us), and with `memory` this
        process's own resident and file-backed-or-shared bytes then (one pread of
        /proc/self/statm), so that the collector need not be woken to read them."""
        line = "at %d" % (time.monotonic_ns() // 1000 if now_us is None else now_us)
        if not memory or (now_us is not None and now_us - self._read_us < _READING_GAP_US):
            return line
        try:
            if self._statm is None:
                self._statm = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            fields = os.pread(self._statm, 128, 0).split()
            resident = int(fields[1])
            if now_us is not None:
                self._read_us = now_us
            return line + " rss_bytes=%d rss_file_bytes=%d" % (
                resident * self._page, min(int(fields[2]), resident) * self._page)
        except (OSError, ValueError, IndexError):
            return line

    def _who_fields(self):
        """Who sent a mark: several processes can share one collector (torchrun's workers)."""
        return " pid=%d" % self._pid + ("" if self.rank is None else " rank=%d" % self.rank)

    def send(self, line):
        """Sends raw protocol line(s), each timed by an `at` line; never blocks, never raises.

        The kernel queues only a few datagrams per Unix socket (`net.unix.max_dgram_qlen`, often
        10), and the collector reads timed datagrams every 2 ms: when a loop marks faster, a send
        fails at once. The line is then kept (up to `_MAX_PENDING`), and what is kept goes out in
        one datagram, which the protocol allows, at the first send `_RETRY_US` after the failure
        (trying at every line would join and encode the growing batch each time); only beyond
        `_MAX_PENDING` is a line dropped (and counted)."""
        if self._sock is None:
            return
        now_us = time.monotonic_ns() // 1000
        urgent = line.startswith("oom")  # the program may be about to die: try at once
        mark = line.startswith("mark ")
        if not self._announced:
            # Who this process is in the job, once, ahead of its first message (and after the
            # `at` that times both: a rank is known from its first mark on).
            self._announced = True
            line = self._process_line() + "\n" + line
        self._send_timed(self._at_line(memory=mark, now_us=now_us) + "\n" + line, now_us, urgent)

    def _send_timed(self, line, now_us, urgent=False):
        """`send` once the message has its `at` line: delivered, or kept while the socket's queue
        is full."""
        if self._pending and now_us - self._failed_us < _RETRY_US and not urgent:
            self._pending.append(line)
            if len(self._pending) > _MAX_PENDING:
                self.dropped += 1
                del self._pending[0]
            return
        lines = self._pending + [line] if self._pending else [line]
        if self._deliver("\n".join(lines) if self._pending else line, now_us):
            self._pending = []
            return
        self._failed_us = now_us
        if len(lines) > _MAX_PENDING:
            self.dropped += len(lines) - _MAX_PENDING
            lines = lines[-_MAX_PENDING:]
        self._pending = lines

    def _deliver(self, text, now_us):
        """Puts one message (lines) into the ring, else sends it as a datagram; False when
        neither could take it."""
        data = text.encode("utf-8", "replace")
        if self._ring_write(data, now_us):
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
        import time

        for _ in range(tries):
            if not self._pending or self._sock is None:
                return
            # Each pending line is one message with its own `at`: sent together, and counted
            # one by one if they cannot be.
            if self._deliver("\n".join(self._pending), time.monotonic_ns() // 1000):
                self._pending = []
                return
            time.sleep(0.001)
        self.dropped += len(self._pending)
        self._pending = []

    def _allocator_fields(self):
        if not self.torch_stats:
            return ""
        torch = sys.modules.get("torch")
        if torch is None:
            return ""
        try:
            if not torch.cuda.is_initialized():
                return ""  # never initialise CUDA from here
            # The allocator's nested statistics, straight from C++: memory_stats() would add
            # ~100 us of flattening in Python per mark.
            stats = torch._C._cuda_memoryStats(torch.cuda.current_device())
        except Exception:  # a broken CUDA state must never break the training loop
            return ""
        fields = ((field, _lookup(stats, path)) for path, field in _STAT_FIELDS)
        return "".join(" %s=%d" % (field, value) for field, value in fields if isinstance(value, int))

    def mark(self, stage, step=None, phase=None, epoch=None):
        """Marks a stage; attaches allocator statistics when torch/CUDA are in use."""
        stage = _token(stage)
        if _tell_hooks("user_mark", stage) is True:
            return  # the zero-code hooks marked this very stage a moment ago
        self._mark(stage, step=step, phase=phase, epoch=epoch)

    def _mark(self, stage, step=None, phase=None, epoch=None):
        """A mark of `stage`, a token already."""
        if self._sock is None:
            return
        line = "mark " + stage
        if step is not None:
            line += " step=%d" % step
        if epoch is not None:
            line += " epoch=%d" % epoch
        if phase is not None:
            line += " phase=" + phase
        self.send(line + self._who + self._allocator_fields())

    def _hook_mark(self, stage, step, phase, cuda):
        """The zero-code hooks' mark (~6 a training step; `stage` and `phase` tokens, `cuda`
        whether the program initialised CUDA): `_mark` and `send` in one for the common case, a
        process announced, nothing pending, a ring with room. Each Python call a mark made cost
        ~1 us in a training loop (its code no longer in the CPU's caches); see
        scripts/measure_hook_parts.py."""
        if step is None or phase is None or not self._announced or self._sock is None:
            self._mark(stage, step=step, phase=phase)
            return
        now_us = time.monotonic_ns() // 1000
        line = "%s\nmark %s step=%d phase=%s%s" % (
            self._at_line(True, now_us), stage, step, phase, self._who)
        if cuda:
            line += self._allocator_fields()
        if self._pending or not self._ring_write(line.encode(), now_us):
            self._send_timed(line, now_us)

    def step(self, step, epoch=None):
        _tell_hooks("user_step")
        if self._sock is None:
            return
        self.send("step %d" % step + ("" if epoch is None else " epoch=%d" % epoch))

    def phase(self, phase):
        """'train' or 'eval'."""
        _tell_hooks("user_phase")
        self.send("phase " + phase)

    def note(self, text):
        self.send("note " + " ".join(str(text).splitlines()))

    def components(self, parameters_bytes=0, buffers_bytes=0, gradients_bytes=0,
                   optimizer_state_bytes=0, batch_size=None, step=None, parameter_count=None,
                   trainable_parameter_count=None, **extras):
        """Model memory by component; extra copies as keyword arguments (ema=bytes, ...). The
        zero-code hooks measure it themselves until the program sends its own."""
        _tell_hooks("user_components")
        self._components(parameters_bytes, buffers_bytes, gradients_bytes, optimizer_state_bytes,
                         batch_size, step, extras.items(), (), parameter_count,
                         trainable_parameter_count)

    def _components(self, parameters_bytes=0, buffers_bytes=0, gradients_bytes=0,
                    optimizer_state_bytes=0, batch_size=None, step=None, extras=(),
                    optimizers=(), parameter_count=None, trainable_parameter_count=None):
        """The line `components` sends; `extras` and `optimizers` are (name, bytes) pairs (the
        zero-code hooks' names may be any identifier, `step` included)."""
        if self._sock is None:
            return
        line = "components parameters_bytes=%d buffers_bytes=%d gradients_bytes=%d optimizer_state_bytes=%d" % (
            parameters_bytes, buffers_bytes, gradients_bytes, optimizer_state_bytes)
        if batch_size is not None:
            line += " batch_size=%d" % batch_size
        if step is not None:
            line += " step=%d" % step
        if parameter_count is not None:
            line += " parameter_count=%d" % parameter_count
        if trainable_parameter_count is not None:
            line += " trainable_parameter_count=%d" % trainable_parameter_count
        for name, size in extras:
            line += " extra.%s=%d" % (_token(name), size)
        for name, size in optimizers:
            line += " optimizer.%s=%d" % (_token(name), size)
        self.send(line)

    def _gc(self, generation, collected, freed_bytes, pause_us):
        """A garbage collection that freed memory (the zero-code hooks' `gc` callback)."""
        if self._sock is None:
            return
        self.send("gc freed_bytes=%d generation=%d collected=%d pause_us=%d" % (
            freed_bytes, generation, collected, pause_us))

    def _input(self, elements, shape, step=None):
        """A training step's input size, when it changed (the zero-code hooks)."""
        if self._sock is None:
            return
        line = "input elements=%d shape=%s" % (elements, _token(shape))
        if step is not None:
            line += " step=%d" % step
        self.send(line)

    def _held(self, count, bytes, from_step, to_step, device, dtype, shape, grad_fn, holder):
        """A group of live tensors that grew across steps (the zero-code hooks' leak census)."""
        if self._sock is None:
            return
        line = "held count=%d bytes=%d from_step=%d to_step=%d device=%s dtype=%s shape=%s" % (
            count, bytes, from_step, to_step, _token(device), _token(dtype), _token(shape))
        if grad_fn:
            line += " grad_fn=" + _token(grad_fn)
        self.send(line + " -- " + " ".join(str(holder).splitlines()))

    def gradients(self, params_with_grad, gradient_bytes, global_norm, nan_count=0, inf_count=0,
                  step=None):
        """A gradient summary you computed (e.g. the norm clip_grad_norm_ returns)."""
        if self._sock is None:
            return
        line = "gradients params_with_grad=%d gradient_bytes=%d global_norm=%s nan_count=%d inf_count=%d" % (
            params_with_grad, gradient_bytes, _float(global_norm), nan_count, inf_count)
        if step is not None:
            line += " step=%d" % step
        self.send(line)

    def tensor(self, name, shape, dtype, bytes, min, max, mean, std, nan_count=0, inf_count=0,
               step=None):
        """Statistics of one tensor you computed."""
        if self._sock is None:
            return
        line = "tensor %s shape=%s dtype=%s bytes=%d min=%s max=%s mean=%s std=%s nan_count=%d inf_count=%d" % (
            _token(name), "x".join(str(int(d)) for d in shape), _token(dtype), bytes, _float(min),
            _float(max), _float(mean), _float(std), nan_count, inf_count)
        if step is not None:
            line += " step=%d" % step
        self.send(line)

    def trial(self, batch_size, outcome, peak_bytes=None):
        """One batch-size trial: outcome 'fit', 'oom' or 'error'."""
        if self._sock is None:
            return
        line = "trial batch_size=%d outcome=%s" % (batch_size, outcome)
        if peak_bytes is not None:
            line += " peak_bytes=%d" % peak_bytes
        self.send(line)

    def oom(self, message="", requested_bytes=None, stage=None, step=None, device=None,
            free_bytes=None, total_bytes=None, allocated_bytes=None, reserved_bytes=None):
        """Records an OOM the program caught (e.g. to retry with a smaller batch)."""
        self._oom(message, requested_bytes=requested_bytes, stage=stage, step=step, device=device,
                  free_bytes=free_bytes, total_bytes=total_bytes,
                  allocated_bytes=allocated_bytes, reserved_bytes=reserved_bytes)

    def _oom(self, message="", source=None, requested_bytes=None, stage=None, step=None,
             device=None, free_bytes=None, total_bytes=None, allocated_bytes=None,
             reserved_bytes=None):
        if self._sock is None:
            return
        line = "oom"
        if stage is not None:
            line += " stage=" + _token(stage)
        if source is not None:
            line += " source=" + source
        for key, value in (("step", step), ("requested_bytes", requested_bytes), ("device", device),
                           ("free_bytes", free_bytes), ("total_bytes", total_bytes),
                           ("pid", self._pid), ("rank", self.rank),
                           ("allocated_bytes", allocated_bytes), ("reserved_bytes", reserved_bytes)):
            if value is not None:
                line += " %s=%d" % (key, value)
        self.send(line + " -- " + " ".join(str(message).splitlines()))

    def _process_line(self):
        line = "process" + "".join(" %s=%d" % (key, value) for key, value in _identity()
                                   if value is not None)
        if self.group is not None:
            line += " group=" + _token(self.group)
        return line

    def process(self, group=None):
        """Says who this process is in the job (rank, local rank, world size, attempt, and the
        group of ranks it is compared with, e.g. its pipeline stage); sent by itself ahead of the
        first message, again after the rank changed (set in-process) or a group was given."""
        self.rank = _rank()
        self._who = self._who_fields()
        if group is not None:
            self.group = str(group)
        self.send(self._process_line())

    def alive(self, rows):
        """What was alive at an OOM, by source line: rows of (file, line, function, bytes, count),
        sent in one datagram so they arrive together, right after the OOM."""
        if self._sock is None or not rows:
            return
        lines = ["alive bytes=%d count=%d line=%d function=%s -- %s" % (
            size, count, line, _token(function or "?"), " ".join(str(path).splitlines()))
            for path, line, function, size, count in rows]
        self.send("\n".join(lines))

    def _reopen(self):
        """A fresh socket after fork (the child must not share the parent's)."""
        old, self._sock = self._sock, None
        if old is not None:
            try:
                old.close()
            except OSError:
                pass
        self.__init__(self.path, self.torch_stats)
        # A forked child (a DataLoader worker) is its parent's helper, not a rank of its own.
        self._announced = True


def _tell_hooks(what, *args):
    """Tells the zero-code hooks (when `collector run` loaded them) what the program marks
    itself, so that nothing is marked twice: the program's own marks win."""
    hooks = sys.modules.get("_oomscope_torch")
    if hooks is not None:
        try:
            return getattr(hooks, what)(*args)
        except Exception:
            return None
    return None


def _float(value):
    """A float as the protocol reads it (nan and inf included)."""
    return repr(float(value))


_default = None


def _probe():
    global _default
    if _default is None:
        _default = Probe()
    return _default


def mark(stage, step=None, phase=None, epoch=None):
    _probe().mark(stage, step=step, phase=phase, epoch=epoch)


def step(n, epoch=None):
    _probe().step(n, epoch=epoch)


def phase(name):
    _probe().phase(name)


def note(text):
    _probe().note(text)


def components(**kwargs):
    _probe().components(**kwargs)


def gradients(*args, **kwargs):
    _probe().gradients(*args, **kwargs)


def tensor(*args, **kwargs):
    _probe().tensor(*args, **kwargs)


def trial(*args, **kwargs):
    _probe().trial(*args, **kwargs)


def oom(message="", **kwargs):
    _probe().oom(message, **kwargs)


def group(name):
    """The group of ranks this rank is compared with (its pipeline stage, `"pp0"`): ranks of
    different groups hold different layers by design, so imbalance is measured within a group."""
    _probe().process(group=name)
