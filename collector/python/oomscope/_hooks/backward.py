"""`pre_backward` / `post_backward`: a pre-hook on the autograd node of the forward's outputs
fires when backward reaches them, and queues an end-of-backward callback on the autograd engine.
Global module backward hooks are never used: they slow backward ~5x and break in-place ops.
"""

from oomscope._hooks.emit import emit
from oomscope._hooks.errors import interrupted
from oomscope._hooks.state import S


def _grad_tensors(output, depth=0):
    Tensor = S.torch.Tensor
    if isinstance(output, Tensor):
        return [output] if output.requires_grad else []
    if depth >= 2:
        return []
    if isinstance(output, dict):
        items = output.values()
    elif isinstance(output, (list, tuple)):
        items = output
    else:
        return []
    found = []
    for item in items:
        found.extend(_grad_tensors(item, depth + 1))
        if len(found) >= 16:
            break
    return found


def watch_backward(output):
    """A pre-hook on the autograd node of each output (leaves are skipped): the first to run is
    backward reaching the forward's outputs. Cheaper than `register_multi_grad_hook` (one C call
    per output instead of a Python object graph), and `_bw_start` keeps one per backward."""
    for tensor in _grad_tensors(output):
        node = tensor.grad_fn
        if node is not None:  # a leaf (a Parameter returned as is) would keep the hook forever
            node.register_prehook(_bw_start)


def _bw_start(grad):
    try:
        torch = S.torch
        task = torch._C._current_graph_task_id()
        if task == S.loop.bw_task:
            return None  # two outputs (or two forwards) in one backward: one pre_backward
        S.loop.bw_task = task
        emit("pre_backward", "train")
        torch.autograd.Variable._execution_engine.queue_callback(_bw_end)
    except BaseException as e:
        interrupted(e)
    return None


def _bw_end():
    try:
        S.loop.backward_done = True
        emit("post_backward", "train")
    except BaseException as e:
        interrupted(e)
