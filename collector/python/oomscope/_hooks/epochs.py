"""Epochs: a DataLoader's iterator begun again. The training loop's loader (the one whose
iterator began last before a training forward) beginning again is an epoch's start. The hooks
then say the epoch (`step N epoch=E`: the marks after it carry it, and the analysis reads memory
kept at epoch ends on that clock) and count the containers the program names against the last
epoch start's count, so that what an epoch's end keeps (a copy of the weights appended to a
history list) is named as a `held` row, `from_step`/`to_step` the two epoch starts' steps.

Why not at every iteration: what an epoch keeps arrives once an epoch, flat in between, so the
leak watch's rising readings (`held.Watch`) never see it; a count once an epoch costs nothing.
"""

from oomscope._hooks import objects
from oomscope._hooks.errors import interrupted, replace
from oomscope._hooks.memory import program_frame
from oomscope._hooks.state import S


def patch_dataloader():
    """`DataLoader.__iter__` (every `for batch in loader` calls it): an iterator begins."""
    def make(original):
        def __iter__(self):
            try:
                _began(self)
            except BaseException as e:
                interrupted(e)
            return original(self)
        return __iter__

    replace(S.torch.utils.data.DataLoader, "__iter__", make)


def _began(loader):
    loop = S.loop
    key = id(loader)
    starts = loop.loader_starts
    if len(starts) >= 256 and key not in starts:
        starts.clear()  # loaders made and dropped all the time
    n = starts[key] = starts.get(key, 0) + 1
    loop.last_loader = key
    if key != loop.train_loader or n < 2 or S.paused or not S.active:
        return
    loop.epoch = n - 1
    if not S.program.steps:  # a program that says its steps says its epochs too, if at all
        S.probe.send("step %d epoch=%d" % (loop.step, loop.epoch))
    _count_containers()


def _count_containers():
    """The containers the program names, against the last epoch start's count."""
    memory = S.memory
    frame = program_frame()
    kept = None
    try:
        kept = objects.containers(S.torch, frame)
        last = memory.epoch_count
        memory.epoch_count = (S.loop.step, objects.keep_only_lengths(kept))
        if last is not None:
            rows = objects.objects_grown(S.torch, last[1], kept, 1, tensors_counted=False)
            for row in rows:
                S.probe.held(row.kind, row.count, row.bytes, last[0], S.loop.step, row.device,
                             row.dtype, row.shape, row.grad_fn, row.holder, row.items, "epoch")
    finally:
        frame = kept = None
