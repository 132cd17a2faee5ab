"""oomscope's marks from inside a Python program: the stages, steps and phases of a training loop,
for `collector run` to record beside the memory it measures.

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

PyTorch programs get stage marks under `collector run` without any code at all (the zero-code
hooks, `oomscope._hooks`); marks sent from here add to those, and a stage marked here is no longer
marked by the hooks. Once torch has initialised CUDA, every mark carries the caching allocator's
statistics. Sends never block: what the collector cannot take is dropped and counted
(`Probe.dropped`). The wire format is the marker protocol, version 1 (docs/protocol.md).

The package's layers, one way: the hooks (`_hooks/`) -> the probe (`_probe`: one per process,
the protocol's verbs) -> the transport (`_transport`: ring, datagram, retry, fork). This module is
the program's door to the probe and holds nothing else.
"""

from oomscope._probe import PROTOCOL_VERSION, Probe, default_probe as _default_probe

# The collector's version (`collector --version`; a test holds them equal).
__version__ = "0.1.0"

__all__ = ["PROTOCOL_VERSION", "Probe", "mark", "step", "phase", "note", "group", "components",
           "gradients", "tensor", "trial", "oom"]


def mark(stage, step=None, phase=None, epoch=None):
    """Marks a stage of the loop (`pre_forward`, or a name of your own)."""
    _default_probe().mark(stage, step=step, phase=phase, epoch=epoch)


def step(n, epoch=None):
    """The training step from here on (the hooks then stop counting steps themselves)."""
    _default_probe().step(n, epoch=epoch)


def phase(name):
    """'train' or 'eval' from here on."""
    _default_probe().phase(name)


def note(text):
    """A line of your own in the trace."""
    _default_probe().note(text)


def group(name):
    """The group of ranks this rank is compared with (its pipeline stage, `"pp0"`): ranks of
    different groups hold different layers by design, so imbalance is measured within a group."""
    _default_probe().process(group=name)


def components(**kwargs):
    """Model memory by component (`parameters_bytes=`, `gradients_bytes=`, ..., extra copies as
    `ema=bytes`): the hooks stop measuring it themselves."""
    _default_probe().components(**kwargs)


def gradients(*args, **kwargs):
    """A gradient summary you computed (`Probe.gradients`)."""
    _default_probe().gradients(*args, **kwargs)


def tensor(*args, **kwargs):
    """Statistics of one tensor you computed (`Probe.tensor`)."""
    _default_probe().tensor(*args, **kwargs)


def trial(*args, **kwargs):
    """One batch-size trial (`Probe.trial`)."""
    _default_probe().trial(*args, **kwargs)


def oom(message="", **kwargs):
    """An OOM the program caught (`Probe.oom`)."""
    _default_probe().oom(message, **kwargs)


def load_ipython_extension(ipython):
    """`%load_ext oomscope` in a Jupyter kernel: records the kernel's memory from now on
    (`oomscope._notebook`; IPython is only imported here)."""
    from oomscope import _notebook

    _notebook.load(ipython)


def unload_ipython_extension(ipython):
    """`%unload_ext oomscope`: stops the recording and takes the hooks off the kernel's path."""
    from oomscope import _notebook

    _notebook.unload(ipython)
