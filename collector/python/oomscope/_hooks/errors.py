"""What a hook does with what it caught, and how the hooks wrap torch's functions: nothing of
ours ever raises into the program, and nothing of ours shows in its tracebacks.

An error of ours is dropped: the program never sees it. A Ctrl-C is the program's: backward's end
callback is the first Python code after a long stretch of C++, so a pending SIGINT surfaces
there, in our frame. With Python's own handler it is raised again the moment our hook returns
(`_thread.interrupt_main`), so the traceback ends in torch or the program, as it does without
us; any other signal-made exception (the program's own handler raised it) goes on up unchanged.
"""

import os
import signal

# Every file of the package (`oomscope/`): frames in them are ours.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def ours(filename):
    """Whether a code object's file is one of oomscope's."""
    return filename.startswith(PACKAGE_DIR)


def interrupted(exc):
    if isinstance(exc, Exception):
        return
    if isinstance(exc, KeyboardInterrupt) and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        import _thread

        _thread.interrupt_main()
        return
    raise exc


def replace(owner, name, make):
    """Replaces `owner.name` (a method or module function) with `make(original)`, keeping the
    original's name and docstring, and `__wrapped__` for whoever inspects it."""
    original = getattr(owner, name)
    wrapper = make(original)
    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", name)
    wrapper.__doc__ = original.__doc__
    setattr(owner, name, wrapper)


def without_our_frames(tb):
    """`tb` with the frames of our files taken out. A Ctrl-C pending while backward runs in C++
    surfaces at the first Python code after it: at the entry of our end-of-backward callback,
    before any `try` of ours can catch it. The exception then goes up through torch as the
    program's own; only its traceback would name us, so the printed traceback is the program's as
    without the collector. (Traceback links are writable since Python 3.7.)"""
    def skip(node):
        while node is not None and ours(node.tb_frame.f_code.co_filename):
            node = node.tb_next
        return node

    head = node = skip(tb)
    while node is not None:
        node.tb_next = skip(node.tb_next)
        node = node.tb_next
    return head
