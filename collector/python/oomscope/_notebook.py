"""`%load_ext oomscope`: oomscope inside a Jupyter kernel, with no restart and no change to cells.

A kernel was started long before anyone thought of memory, so `collector run` cannot start it.
Loading the extension starts `collector attach` on the kernel's own pid (the kernel and the
processes it starts: DataLoader workers, compile workers), with a marker socket whose path the
collector writes to a file this module waits for. From then on the kernel's probe sends there:
each cell run is two marks, `pre_cell` and `post_cell`, with a note naming the cell (its
execution count and first line); the marks keep the training step where it is (a cell is no
step: the stage table says what each cell run added), and once the kernel has imported torch the zero-code hooks are
installed in-process (after the cell that imported it), so training steps run inside cells are
marked as under `collector run`.

`%oomscope` prints what `collector summary` says of the trace so far: the same analysis and
words as the terminal and the report. `%unload_ext oomscope` stops the collector (it detaches:
the kernel goes on), takes the hooks off the kernel's path (`_hooks.pause`) and the cell marks
off its events; the kernel's results are unchanged.

Where the collector is: `OOMSCOPE_COLLECTOR`, else `collector` on the PATH (the wheel installs
it there). The trace goes to `OOMSCOPE_TRACE`, else `oomscope-kernel-PID.oomt` in the kernel's
working directory; loaded again, to `…-2.oomt` and on (an earlier recording is never overwritten),
and the hooks installed the first time are resumed.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from oomscope import _probe, _traceback

# A traceback that keeps less is not worth a word (a frame's small tensors, an index).
KEPT_MIN_BYTES = 1 << 20

# How long to wait for the collector's socket, and for it to close its trace at unload.
START_S = 15.0
STOP_S = 15.0


class _Session:
    """One loaded extension: the collector attached to this kernel, its trace, our callbacks."""

    def __init__(self, ipython, collector, trace, process, socket_dir):
        self.ipython = ipython
        self.collector = collector
        self.trace = trace
        self.process = process
        self.socket_dir = socket_dir
        self.hooks = None  # oomscope._hooks once installed here
        self.cells = 0

    # IPython prints a callback's exception under the cell: ours never raise.

    def pre_run_cell(self, info=None):
        try:
            count = self.ipython.execution_count
            source = getattr(info, "raw_cell", "") or ""
            first = next((line.strip() for line in source.splitlines() if line.strip()), "")
            probe = _probe.default_probe()
            probe.note("cell [%d]: %s" % (count, first[:120]))
            probe.mark("pre_cell")
        except Exception:
            pass

    def post_run_cell(self, result=None):
        try:
            self.cells += 1
            _probe.default_probe().mark("post_cell")
            if self.hooks is None and "torch" in sys.modules:
                self.hooks = _install_hooks(sys.modules["torch"])
            error = getattr(result, "error_in_exec", None)
            if error is None:
                return
            rows, total = _traceback.kept(error)
            if total >= KEPT_MIN_BYTES:
                print(_traceback.words(rows, total))
        except Exception:
            pass


_session = None


_installed = None  # oomscope._hooks once installed in this kernel (a reload resumes them)


def _install_hooks(torch):
    """The zero-code hooks, in this process, once torch is imported (as the bootstrap of
    `collector run` installs them after `import torch`); loaded again after an unload, the
    hooks installed then are resumed, sending to the new collector."""
    global _installed
    try:
        from oomscope import _hooks

        if _installed is None:
            _hooks.install(torch)
            _installed = _hooks
        else:
            _hooks.resume_with(_probe.default_probe())
        return _hooks
    except Exception:
        return False  # marks of cells only


def _find_collector():
    found = os.environ.get("OOMSCOPE_COLLECTOR") or shutil.which("collector")
    if not found:
        raise RuntimeError("oomscope: no `collector` on the PATH (install the oomscope wheel, or "
                           "set OOMSCOPE_COLLECTOR to the binary)")
    return found


def _new_path(path):
    """`path`, or `NAME-2.oomt`, `NAME-3.oomt`, ... when it exists: loaded again, the extension
    never overwrites an earlier recording of the kernel."""
    stem, ext = os.path.splitext(path)
    n = 1
    while os.path.exists(path):
        n += 1
        path = "%s-%d%s" % (stem, n, ext)
    return path


def load(ipython):
    global _session
    if _session is not None:
        print("oomscope: already recording this kernel into %s" % _session.trace)
        return
    if os.environ.get("OOMSCOPE_SOCKET"):
        print("oomscope: this kernel already runs under `collector run`: its recording goes on")
        return
    collector = _find_collector()
    trace = _new_path(os.path.abspath(os.environ.get("OOMSCOPE_TRACE")
                                      or "oomscope-kernel-%d.oomt" % os.getpid()))
    socket_dir = tempfile.mkdtemp(prefix="oomscope-notebook-")
    socket_file = os.path.join(socket_dir, "socket")
    process = subprocess.Popen(
        [collector, "attach", str(os.getpid()), "-q", "-o", trace, "--socket-file", socket_file],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        # Its own session: the kernel's interrupts (Ctrl-C in the notebook) are not the collector's.
        start_new_session=True)
    deadline = time.monotonic() + START_S
    while not os.path.exists(socket_file):
        if process.poll() is not None or time.monotonic() > deadline:
            err = process.stderr.read().decode(errors="replace").strip() if process.poll() \
                is not None else "no socket after %.0f s" % START_S
            _stop(process)
            shutil.rmtree(socket_dir, ignore_errors=True)
            raise RuntimeError("oomscope: the collector did not start: %s" % err)
        time.sleep(0.02)
    with open(socket_file) as f:
        path = f.read()
    # The kernel's children (DataLoader workers) send there too, as under `collector run`.
    os.environ["OOMSCOPE_SOCKET"] = path
    os.environ["OOMSCOPE_PROTOCOL"] = str(_probe.PROTOCOL_VERSION)
    _probe.connect(path)
    _session = _Session(ipython, collector, trace, process, socket_dir)
    ipython.events.register("pre_run_cell", _session.pre_run_cell)
    ipython.events.register("post_run_cell", _session.post_run_cell)
    if "torch" in sys.modules:
        _session.hooks = _install_hooks(sys.modules["torch"])
    ipython.register_magic_function(_magic, magic_kind="line", magic_name="oomscope")
    print("oomscope: recording this kernel (pid %d) into %s; `%%oomscope` shows what memory "
          "did" % (os.getpid(), trace))


def _memory():
    """(host RSS, CUDA allocated or None) of this kernel now."""
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    torch = sys.modules.get("torch")
    cuda = None
    if torch is not None and torch.cuda.is_initialized():
        cuda = torch.cuda.memory_allocated()
    return rss, cuda


def _release():
    """`%oomscope release`: drops what keeps the last error's traceback, collects, gives the
    CUDA cache back, and says what came back, measured."""
    import gc

    ipython = _session.ipython if _session is not None else None
    error = _traceback.last_exception(ipython)
    kept = _traceback.kept(error)[1] if error is not None else 0
    del error
    before = _memory()
    _traceback.release(ipython)
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    after = _memory()
    said = "host RSS %s -> %s" % (_traceback.format_bytes(before[0]),
                                  _traceback.format_bytes(after[0]))
    if before[1] is not None:
        said += ", CUDA allocated %s -> %s" % (_traceback.format_bytes(before[1]),
                                               _traceback.format_bytes(after[1]))
    print("oomscope: released the last error (its traceback kept %s): %s" % (
        _traceback.format_bytes(kept), said))


def _magic(line=""):
    """`%oomscope`: the analysis of the kernel's memory so far, in `collector summary`'s words;
    `%oomscope release`: free what the last error's traceback keeps."""
    if line.strip() == "release":
        _release()
        return
    if _session is None:
        print("oomscope: not recording (run `%load_ext oomscope`)")
        return
    _probe.default_probe().flush()
    time.sleep(0.6)  # the recorder writes at least twice a second
    out = subprocess.run([_session.collector, "summary", _session.trace],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # The trace is read while it is written: that it has no end yet is known, not a warning.
    print("".join(line for line in out.stdout.decode(errors="replace").splitlines(True)
                  if not line.startswith("warning: the recording did not finish cleanly")), end="")


def _stop(process):
    """SIGINT: the collector detaches (the kernel goes on) and closes its trace."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def unload(ipython):
    global _session
    s, _session = _session, None
    if s is None:
        return
    for event, callback in (("pre_run_cell", s.pre_run_cell),
                            ("post_run_cell", s.post_run_cell)):
        try:
            ipython.events.unregister(event, callback)
        except ValueError:
            pass
    if s.hooks:
        s.hooks.pause()
    _probe.default_probe().flush()
    _stop(s.process)
    for name in ("OOMSCOPE_SOCKET", "OOMSCOPE_PROTOCOL"):
        os.environ.pop(name, None)
    _probe.connect(None)
    shutil.rmtree(s.socket_dir, ignore_errors=True)
    print("oomscope: stopped recording; the trace is %s" % s.trace)
