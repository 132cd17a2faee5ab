"""oomscope's bootstrap: `collector run` puts this directory first on the child's PYTHONPATH.

Python runs `sitecustomize` before the program's own code (not under `python -I`, `-E` or `-S`:
those run uninstrumented). This file does three things and nothing else:
1. it runs the user's own sitecustomize, if there is one further down the path (the ddtrace-run
   way: step aside, import again, step back), so nothing the user set up is lost;
2. when the program imports torch, and only then, it imports `oomscope._hooks` (the package
   beside this file) right after torch finishes importing, and installs them. torch is never
   imported from here: a Python that never imports torch (pip, a multiprocessing helper, a
   non-training script) pays one dictionary lookup per import and nothing else;
3. nothing more: no output, no thread, no CUDA. Every failure of oomscope's own code is
   swallowed (`BaseException`: a SystemExit escaping sitecustomize would kill the interpreter),
   so the program runs exactly as it would without the collector.
"""


def _oomscope_install():
    import os
    import sys

    if not os.environ.get("OOMSCOPE_SOCKET"):
        return
    here = os.path.dirname(os.path.abspath(__file__))

    class _TorchWatcher:
        """A meta-path finder that only answers for `torch`, to run the hooks after it loads. It
        stays on `sys.meta_path` until torch is actually loaded: libraries probe with
        `importlib.util.find_spec("torch")` long before (or without) importing it."""

        busy = False

        def find_spec(self, name, path=None, target=None):
            if name != "torch" or self.busy:
                return None
            self.busy = True
            try:
                import importlib.util

                spec = importlib.util.find_spec("torch")
            except BaseException:
                return None
            finally:
                self.busy = False
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _AfterLoad(spec.loader, self)
            return spec

    class _AfterLoad:
        """Wraps torch's loader: run it, then (never failing) install the hooks."""

        def __init__(self, loader, watcher):
            self._loader = loader
            self._watcher = watcher

        def __getattr__(self, name):
            return getattr(self._loader, name)

        def create_module(self, spec):
            return self._loader.create_module(spec)

        def exec_module(self, module):
            try:
                sys.meta_path.remove(self._watcher)
            except BaseException:
                pass
            # torch sees its own loader, as it would without us.
            try:
                module.__spec__.loader = self._loader
                module.__loader__ = self._loader
            except BaseException:
                pass
            self._loader.exec_module(module)
            try:
                _import_hooks().install(module)
            except BaseException:
                pass

    def _import_hooks():
        """`oomscope._hooks`, this directory's copy: an ordinary import, with this directory first
        on the path for its duration (by the time torch is imported the script's own directory
        is first, and might hold a module of that name)."""
        if "oomscope" not in sys.modules:
            sys.path.insert(0, here)
            try:
                import oomscope  # noqa: F401
            finally:
                try:
                    sys.path.remove(here)
                except ValueError:
                    pass
        import oomscope._hooks

        return oomscope._hooks

    if "torch" in sys.modules:
        return
    if any(type(f).__name__ == "_TorchWatcher" for f in sys.meta_path):
        return  # a collector inside a collector: the innermost bootstrap (first on the path) won
    sys.meta_path.insert(0, _TorchWatcher())


def _oomscope_chain():
    """Imports the next `sitecustomize` on the path, as Python would have without us. Its own
    exceptions propagate: Python's `site` then reports them exactly as it always does."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    # Step aside (our entries only), and step back in at the same places afterwards: whatever
    # the user's sitecustomize adds to sys.path stays.
    removed = [(i, p) for i, p in enumerate(sys.path) if os.path.abspath(p or ".") == here]
    for i, _ in reversed(removed):
        del sys.path[i]
    try:
        try:
            import sitecustomize  # noqa: F401  (the user's)
        except ImportError as e:
            if e.name != "sitecustomize":
                raise
    finally:
        for i, p in removed:
            sys.path.insert(min(i, len(sys.path)), p)
        if ours is not None:
            sys.modules["_oomscope_sitecustomize"] = ours
            # Python's import machinery looks the name up once we return: without a user's
            # sitecustomize, the name stays ours.
            sys.modules.setdefault("sitecustomize", ours)


try:
    _oomscope_install()
except BaseException:
    pass
_oomscope_chain()
