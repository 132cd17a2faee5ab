"""The training step's input size: the first tensor its outermost training forwards were given,
the largest of the step (micro-batches), sent at the step's end when it differs from the last one
sent: a loop of fixed-size batches sends one record, a step among them with a longer batch two.
A program that never trains (a serving or inference loop) sends each outermost forward's input
after the forward (`forward.fw_post`), on the same terms: its clock is the forward.
"""

from oomscope._hooks.budget import input_seen
from oomscope._hooks.state import S


def take_input(args):
    """Looks for the step's input among `args`: called for the outermost training forward's
    positional arguments, then its keyword arguments (`input_ids=`; the hook on a root has them),
    then, while none is found and the global hooks are on (they see positional arguments only),
    for each module it calls: the embedding gets the token ids."""
    Tensor = S.torch.Tensor
    if type(args) is tuple and args and type(args[0]) is Tensor:
        a = args[0]  # the common case, a batch first: nothing to look through
    else:
        a = first_tensor(args, Tensor)
        if a is None:
            return
    inputs = S.inputs
    inputs.pending = False
    step = S.loop.step
    if inputs.step != step:
        flush_input()  # a step that ended without an optimizer (weights updated by hand)
        inputs.step = step
    n = a.numel()
    if inputs.largest is None or n > inputs.largest[0]:
        inputs.largest = (n, tuple(a.shape))
        input_seen(n)


def first_tensor(args, Tensor):
    """The first tensor among `args`, or one level into a list, tuple or dict among them."""
    for a in args:
        kind = type(a)
        if issubclass(kind, dict):
            a = next((v for v in a.values() if issubclass(type(v), Tensor)), None)
        elif issubclass(kind, (list, tuple)):
            a = next((v for v in a if issubclass(type(v), Tensor)), None)
        if a is not None and issubclass(type(a), Tensor):
            return a
    return None


def flush_input():
    """Sends the ended step's largest input when it differs from the last one sent."""
    inputs = S.inputs
    m, inputs.largest = inputs.largest, None
    if m is None or m[1] == inputs.shape or not S.active or S.paused:
        return
    inputs.shape = m[1]
    S.probe.input(m[0], "x".join(map(str, m[1])) or "scalar",
                  step=None if S.program.steps else inputs.step)
