"""`pre_checkpoint_save` / `post_checkpoint_save` around `torch.save`: a checkpoint (a state
dict's copies, the pickler's buffers, a CPU copy of device tensors) is a spike of its own, in the
phase and step it happens in, so that the analysis names it instead of blaming the step.
"""

from oomscope._hooks.emit import emit
from oomscope._hooks.errors import interrupted, replace
from oomscope._hooks.state import S

# The stages around torch.save (`oomscope_format::CHECKPOINT_SAVE_STAGES`; a test holds them
# equal).
PRE_SAVE, POST_SAVE = "pre_checkpoint_save", "post_checkpoint_save"


def patch_save():
    def make(original):
        def save(*args, **kwargs):
            _save_mark(PRE_SAVE)
            try:
                return original(*args, **kwargs)
            finally:
                _save_mark(POST_SAVE)
        return save

    replace(S.torch, "save", make)


def _save_mark(stage):
    try:
        if not S.fwd.depth and S.torch._C._current_graph_task_id() == -1:
            emit(stage, S.loop.last_phase or "train", always=True)
    except BaseException as e:
        interrupted(e)
