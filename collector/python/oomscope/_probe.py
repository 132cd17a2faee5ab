"""The probe: one per process, it formats the marker protocol's verbs (docs/protocol.md) and hands
each message to the transport. The program's calls (the public `oomscope` functions) and the
zero-code hooks both send through it.

What it adds to a message, and why here:
- an `at` line first: when the message happened (CLOCK_MONOTONIC, us), and for a mark this
  process's own resident and file-backed bytes then (one pread of /proc/self/statm), so that the
  collector need not be woken to read them; not within `READING_GAP_US` of its last reading,
  which the collector would throw away (`MIN_MARK_READING_GAP_US`; a test holds them equal);
- who sent it (pid, rank): several processes can share one collector (torchrun's workers); a
  `process` line once, ahead of a rank's first message;
- the CUDA caching allocator's statistics on each mark, once the program initialised CUDA (read
  straight from `torch._C._cuda_memoryStats`: ~24 us a mark instead of ~118 through
  `memory_stats()`, measured on an H100 with torch 2.11).

The hooks learn of the program's own marks through a listener they register (`listen`): the
program's marks win, and nothing is marked twice. This module never imports the hooks.
"""

import atexit
import os
import sys

from oomscope._transport import Transport, now_us

PROTOCOL_VERSION = 1
# A mark this soon after the sender's last reading of itself carries none: the collector takes no
# reading closer than this to the last one (`MIN_MARK_READING_GAP_US`; a test holds them equal), so
# it would be thrown away.
READING_GAP_US = 200

# Paths in the allocator's nested statistics (torch._C._cuda_memoryStats) -> protocol fields.
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

# The launchers' names for a process's place in the job, in order of precedence: the same lists
# as `oomscope_collector::launch_env` (a test holds them equal).
_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_WORLD_SIZE_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_ATTEMPT_VARS = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")

_listener = None  # what the zero-code hooks registered (`listen`), else None


def listen(listener):
    """Registers the zero-code hooks' listener: an object with `user_mark(stage)` (returns True
    when the hooks marked that stage in this step already), `user_step()`, `user_phase()` and
    `user_components()`, called when the program sends those itself."""
    global _listener
    _listener = listener


def _lookup(stats, path):
    for key in path:
        if not isinstance(stats, dict) or key not in stats:
            return None
        stats = stats[key]
    return stats


# Slurm's task variables describe a task only inside an `srun` step (`SLURM_STEP_ID` set): an
# sbatch script's batch step has SLURM_PROCID=0 with no step (`launch_env::SLURM_STEP_ONLY_VARS`).
_SLURM_STEP_ONLY_VARS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")


# The verbs whose `at` line carries the sender's memory, and those sent at once rather than
# with the next batch (the run may end on them).
_WITH_MEMORY = frozenset(("mark",))
_URGENT = frozenset(("oom",))

def _first_number(names):
    in_step = "SLURM_STEP_ID" in os.environ
    for name in names:
        if not in_step and name in _SLURM_STEP_ONLY_VARS:
            continue
        try:
            return int(os.environ[name])
        except (KeyError, ValueError):
            continue
    return None


def identity():
    """This process's place in a distributed job, as its environment says now (launchers that set
    the rank inside the process, like DeepSpeed's MPI path or Ray, are seen too)."""
    return (("rank", _first_number(_RANK_VARS)),
            ("local_rank", _first_number(_LOCAL_RANK_VARS)),
            ("world_size", _first_number(_WORLD_SIZE_VARS)),
            ("restart", _first_number(_ATTEMPT_VARS)))


def token(text):
    """Stage and tensor names are single tokens: whitespace becomes '_'."""
    return "_".join(str(text).split()) or "_"


def _float(value):
    """A float as the protocol reads it (nan and inf included)."""
    return repr(float(value))


def _one_line(text):
    return " ".join(str(text).splitlines())


class Probe:
    """A connection to the collector watching this process (or none: outside `collector run`
    every call returns at once and sends nothing)."""

    def __init__(self, path=None, torch_stats=True):
        if path is None:
            path = os.environ.get("OOMSCOPE_SOCKET")
        if os.environ.get("OOMSCOPE_PROTOCOL", str(PROTOCOL_VERSION)) != str(PROTOCOL_VERSION):
            path = None
        self.path = path
        self.torch_stats = torch_stats
        self.transport = Transport(path)
        self.rank = identity()[0][1]
        # getpid() is a system call each time (glibc no longer caches it): kept, and renewed in a
        # forked child.
        self._pid = os.getpid()
        self.group = None
        self._announced = self.rank is None
        self._who = self._who_fields()
        self._statm = None  # /proc/self/statm, opened at the first mark (again after a fork)
        self._read_us = 0  # when it was last read
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        if self.transport.enabled:
            atexit.register(self.flush)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=self._after_fork)

    @property
    def enabled(self):
        return self.transport.enabled

    @property
    def dropped(self):
        """Messages the collector could not take (never waited for)."""
        return self.transport.dropped

    def flush(self):
        self.transport.flush()

    def _after_fork(self):
        """A forked child (a DataLoader worker) is its parent's helper, not a rank of its own."""
        self._pid = os.getpid()
        self._who = self._who_fields()
        self._announced = True
        # The file was opened as /proc/self of the parent: it would read the parent's memory.
        if self._statm is not None:
            try:
                os.close(self._statm)
            except OSError:
                pass
        self._statm = None
        self._read_us = 0
        self.transport.after_fork()

    # --- what every message carries -----------------------------------------------------------

    def _at_line(self, memory=False, now=None):
        """`at`: when the message after it happened, and with `memory` this process's own resident
        and file-backed-or-shared bytes then, unless read under `READING_GAP_US` ago."""
        line = "at %d" % (now_us() if now is None else now)
        if not memory or (now is not None and now - self._read_us < READING_GAP_US):
            return line
        try:
            if self._statm is None:
                self._statm = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            fields = os.pread(self._statm, 128, 0).split()
            resident = int(fields[1])
            if now is not None:
                self._read_us = now
            return line + " rss_bytes=%d rss_file_bytes=%d" % (
                resident * self._page, min(int(fields[2]), resident) * self._page)
        except (OSError, ValueError, IndexError):
            return line

    def _who_fields(self):
        return " pid=%d" % self._pid + ("" if self.rank is None else " rank=%d" % self.rank)

    def send(self, line):
        """Sends raw protocol line(s), timed by an `at` line; never blocks, never raises. What
        the message's verb (its first word) is decides the rest: a mark's `at` carries this
        process's memory, an OOM is sent at once (`_URGENT`)."""
        if not self.transport.enabled:
            return
        now = now_us()
        verb = line.split(" ", 1)[0]
        if not self._announced:
            # Who this process is in the job, once, ahead of its first message (and after the
            # `at` that times both: a rank is known from its first mark on).
            self._announced = True
            line = self._process_line() + "\n" + line
        self.transport.send(self._at_line(verb in _WITH_MEMORY, now) + "\n" + line, now,
                            urgent=verb in _URGENT)

    def allocator_fields(self):
        """The CUDA caching allocator's statistics as mark fields ("" before CUDA is initialised:
        never initialised from here)."""
        if not self.torch_stats:
            return ""
        torch = sys.modules.get("torch")
        if torch is None:
            return ""
        try:
            if not torch.cuda.is_initialized():
                return ""
            stats = torch._C._cuda_memoryStats(torch.cuda.current_device())
        except Exception:  # a broken CUDA state must never break the training loop
            return ""
        fields = ((field, _lookup(stats, path)) for path, field in _STAT_FIELDS)
        return "".join(" %s=%d" % (field, value) for field, value in fields if isinstance(value, int))

    # --- the verbs -------------------------------------------------------------------------------

    def mark(self, stage, step=None, phase=None, epoch=None):
        """Marks a stage (the program's own); attaches allocator statistics once CUDA is in use."""
        stage = token(stage)
        if _listener is not None and _listener.user_mark(stage) is True:
            return  # the zero-code hooks marked this very stage a moment ago
        self._mark(stage, step, phase, epoch)

    def _mark(self, stage, step=None, phase=None, epoch=None):
        if not self.transport.enabled:
            return
        line = "mark " + stage
        if step is not None:
            line += " step=%d" % step
        if epoch is not None:
            line += " epoch=%d" % epoch
        if phase is not None:
            line += " phase=" + phase
        self.send(line + self._who + self.allocator_fields())

    def hook_mark(self, stage, step, phase, cuda):
        """The zero-code hooks' mark (~6 a training step; `stage` and `phase` tokens, `cuda`
        whether the program initialised CUDA): `mark` and `send` in one for the common case (a
        process announced, nothing pending, a ring with room); see scripts/measure_hook_parts.py."""
        if step is None or phase is None or not self._announced or not self.transport.enabled:
            self._mark(stage, step, phase)
            return
        now = now_us()
        line = "%s\nmark %s step=%d phase=%s%s" % (
            self._at_line(True, now), stage, step, phase, self._who)
        if cuda:
            line += self.allocator_fields()
        self.transport.send_fast(line, now)

    def step(self, step, epoch=None):
        if _listener is not None:
            _listener.user_step()
        self.send("step %d" % step + ("" if epoch is None else " epoch=%d" % epoch))

    def phase(self, phase):
        """'train' or 'eval'."""
        if _listener is not None:
            _listener.user_phase()
        self.send("phase " + phase)

    def note(self, text):
        self.send("note " + _one_line(text))

    def components(self, parameters_bytes=0, buffers_bytes=0, gradients_bytes=0,
                   optimizer_state_bytes=0, batch_size=None, step=None, parameter_count=None,
                   trainable_parameter_count=None, **extras):
        """Model memory by component; extra copies as keyword arguments (ema=bytes, ...). The
        zero-code hooks measure it themselves until the program sends its own."""
        if _listener is not None:
            _listener.user_components()
        self.measured_components(parameters_bytes, buffers_bytes, gradients_bytes,
                                 optimizer_state_bytes, batch_size, step, extras.items(), (),
                                 parameter_count, trainable_parameter_count)

    def measured_components(self, parameters_bytes=0, buffers_bytes=0, gradients_bytes=0,
                            optimizer_state_bytes=0, batch_size=None, step=None, extras=(),
                            optimizers=(), parameter_count=None, trainable_parameter_count=None):
        """`components`; `extras` and `optimizers` as (name, bytes) pairs, whose names may be any
        identifier (`step` included): what the zero-code breakdown measured."""
        if not self.transport.enabled:
            return
        line = ("components parameters_bytes=%d buffers_bytes=%d gradients_bytes=%d "
                "optimizer_state_bytes=%d" % (parameters_bytes, buffers_bytes, gradients_bytes,
                                              optimizer_state_bytes))
        for key, value in (("batch_size", batch_size), ("step", step),
                           ("parameter_count", parameter_count),
                           ("trainable_parameter_count", trainable_parameter_count)):
            if value is not None:
                line += " %s=%d" % (key, value)
        for name, size in extras:
            line += " extra.%s=%d" % (token(name), size)
        for name, size in optimizers:
            line += " optimizer.%s=%d" % (token(name), size)
        self.send(line)

    def gc(self, generation, collected, freed_bytes, pause_us):
        """A garbage collection that freed memory."""
        self.send("gc freed_bytes=%d generation=%d collected=%d pause_us=%d" % (
            freed_bytes, generation, collected, pause_us))

    def input(self, elements, shape, step=None):
        """A training step's input size, when it changed."""
        line = "input elements=%d shape=%s" % (elements, token(shape))
        if step is not None:
            line += " step=%d" % step
        self.send(line)

    def held(self, kind, count, bytes, from_step, to_step, device, dtype, shape, grad_fn, holder,
             items=None, clock="step"):
        """A group of live objects that grew between two counts (the zero-code hooks' leak
        census): `kind` says what the row is (`tensors`, `graph`, `cycle`, `uncontained`,
        `objects`), `clock` what `from_step`/`to_step` count (`step`, `forward`, `epoch`,
        `eval`), `holder` names what holds them, `items` its length when it is a container; an
        empty device, dtype, shape or node is left out (an `objects` row has none;
        docs/protocol.md)."""
        line = "held kind=%s clock=%s count=%d bytes=%d from_step=%d to_step=%d" % (
            kind, clock, count, bytes, from_step, to_step)
        for key, value in (("device", device), ("dtype", dtype), ("shape", shape),
                           ("grad_fn", grad_fn)):
            if value:
                line += " %s=%s" % (key, token(value))
        if items is not None:
            line += " items=%d" % items
        self.send(line + (" -- " + _one_line(holder) if holder else ""))

    def sampling(self, every, from_step, iteration_us, last_step=None):
        """The zero-code hooks mark one training iteration in `every` from `from_step` on (a fast
        loop: iterations of `iteration_us`; hooks/budget.py); as the process exits, with the last
        step the loop reached."""
        line = "sampling every=%d from_step=%d iteration_us=%d" % (every, from_step, iteration_us)
        if last_step is not None:
            line += " last_step=%d" % last_step
        self.send(line)

    def program_end(self):
        """This process's own code ended; its interpreter's shutdown follows (hooks/__init__)."""
        self.send("program_end")

    def eval_autograd(self, enabled):
        """Whether this process's eval forwards run with autograd on (sent once for each)."""
        self.send("eval_autograd " + ("on" if enabled else "off"))

    def memory_snapshot(self, file_name):
        """The PyTorch memory snapshot saved next to the trace (its file's name)."""
        self.send("memory_snapshot -- " + _one_line(file_name))

    def gradients(self, params_with_grad, gradient_bytes, global_norm, nan_count=0, inf_count=0,
                  step=None):
        """A gradient summary you computed (e.g. the norm clip_grad_norm_ returns)."""
        line = "gradients params_with_grad=%d gradient_bytes=%d global_norm=%s nan_count=%d inf_count=%d" % (
            params_with_grad, gradient_bytes, _float(global_norm), nan_count, inf_count)
        if step is not None:
            line += " step=%d" % step
        self.send(line)

    def tensor(self, name, shape, dtype, bytes, min, max, mean, std, nan_count=0, inf_count=0,
               step=None):
        """Statistics of one tensor you computed."""
        line = "tensor %s shape=%s dtype=%s bytes=%d min=%s max=%s mean=%s std=%s nan_count=%d inf_count=%d" % (
            token(name), "x".join(str(int(d)) for d in shape), token(dtype), bytes, _float(min),
            _float(max), _float(mean), _float(std), nan_count, inf_count)
        if step is not None:
            line += " step=%d" % step
        self.send(line)

    def trial(self, batch_size, outcome, peak_bytes=None):
        """One batch-size trial: outcome 'fit', 'oom' or 'error'."""
        line = "trial batch_size=%d outcome=%s" % (batch_size, outcome)
        if peak_bytes is not None:
            line += " peak_bytes=%d" % peak_bytes
        self.send(line)

    def oom(self, message="", requested_bytes=None, stage=None, step=None, device=None,
            free_bytes=None, total_bytes=None, allocated_bytes=None, reserved_bytes=None,
            source=None):
        """An OOM: one the program caught (e.g. to retry with a smaller batch), or (`source`) one
        the hooks saw (`allocator`, `host_error`)."""
        if not self.transport.enabled:
            return
        line = "oom"
        if stage is not None:
            line += " stage=" + token(stage)
        if source is not None:
            line += " source=" + source
        for key, value in (("step", step), ("requested_bytes", requested_bytes), ("device", device),
                           ("free_bytes", free_bytes), ("total_bytes", total_bytes),
                           ("pid", self._pid), ("rank", self.rank),
                           ("allocated_bytes", allocated_bytes), ("reserved_bytes", reserved_bytes)):
            if value is not None:
                line += " %s=%d" % (key, value)
        self.send(line + " -- " + _one_line(message))

    def _process_line(self):
        line = "process" + "".join(" %s=%d" % (key, value) for key, value in identity()
                                   if value is not None)
        if self.group is not None:
            line += " group=" + token(self.group)
        return line

    def process(self, group=None):
        """Says who this process is in the job (rank, local rank, world size, attempt, and the
        group of ranks it is compared with, e.g. its pipeline stage); sent by itself ahead of the
        first message, again after the rank changed (set in-process) or a group was given."""
        self.rank = identity()[0][1]
        self._who = self._who_fields()
        if group is not None:
            self.group = str(group)
        self.send(self._process_line())

    def alive(self, rows):
        """What was alive at an OOM, by source line: rows of (file, line, function, bytes, count),
        sent in one message so they arrive together, right after the OOM."""
        if not rows:
            return
        self.send("\n".join("alive bytes=%d count=%d line=%d function=%s -- %s" % (
            size, count, line, token(function or "?"), _one_line(path))
            for path, line, function, size, count in rows))


_default = None


def default_probe():
    """This process's probe (made at its first use): the program's calls and the hooks share it."""
    global _default
    if _default is None:
        _default = Probe()
    return _default


def connect(path):
    """Makes this process's probe send to the collector at `path` from now on, or to none with
    `path=None`: a collector attached after the process started (the IPython extension's) rather
    than one that started it. The probe it replaces is flushed and closed. Returns the new probe."""
    global _default
    old, _default = _default, Probe(path or "")
    if old is not None and old.enabled:
        try:
            old.flush()
            old.transport.close()
        except BaseException:
            pass
    return _default
