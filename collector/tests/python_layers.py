"""The Python side's layers, read with `ast` (run by `collector/tests/python_layers.rs`; any
Python 3.8+, no torch): the package `collector/python/oomscope` imports one way, the hooks ->
the probe -> the transport, the public module is the program's door to the probe (and to the
notebook extension, which sits above the hooks and the probe, imported only when IPython loads it); no
import circle among the hooks' modules; nothing reaches a module of ours through `sys.modules`
or loads one by path (`importlib`), so every arrow is an import a reader can see; no file past
`MAX_LINES`. Prints each module's lines; exits 1 with one line per broken rule.
"""

import ast
import os
import sys

MAX_LINES = 500
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")

# Which modules of ours each layer may import (a name ending in "." allows its whole package).
ALLOWED = {
    "oomscope._transport": (),
    "oomscope._probe": ("oomscope._transport",),
    "oomscope": ("oomscope._probe", "oomscope._notebook"),
    "oomscope._notebook": ("oomscope._probe", "oomscope._hooks", "oomscope._traceback"),
    "oomscope._traceback": (),
    "oomscope._hooks.": ("oomscope._probe", "oomscope._hooks."),
    "oomscope_probe": ("oomscope",),
    "sitecustomize": ("oomscope", "oomscope._hooks"),
}


def modules():
    """{module name: path} of every Python file under collector/python."""
    found = {}
    for directory, _, files in os.walk(ROOT):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
            if rel[0] == "boot":
                rel = rel[1:]
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join(rel)] = path
    return found


def imports(name, path, ours):
    """The modules of ours that `name` imports (anywhere in the file), and the rule breaks that
    are not arrows (sys.modules, importlib)."""
    tree = ast.parse(open(path).read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out, bad = set(), []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(p for p in parts + [base] if p)
            targets = [base] + ["%s.%s" % (base, a.name) for a in node.names]
        elif _reads_sys_modules(node):
            bad.append("%s reaches a module of ours through sys.modules (line %d)" % (
                name, node.lineno))
        elif isinstance(node, ast.Attribute) and node.attr == "spec_from_file_location":
            bad.append("%s loads a module by path (line %d)" % (name, node.lineno))
        out.update(t for t in targets if t in ours)
    out.discard(name)
    return out, bad


def _reads_sys_modules(node):
    """`sys.modules["...oomscope..."]` read, or `sys.modules.get("...oomscope...")`: a module of
    ours looked up instead of imported (storing our own module there is not an arrow)."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
            ast.unparse(node.value) == "sys.modules":
        key = node.slice
    elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.modules.get",
                                                                   "sys.modules.pop"):
        key = node.args[0] if node.args else None
    else:
        return False
    return isinstance(key, ast.Constant) and "oomscope" in str(key.value)


def allowed(module, target):
    for layer, targets in ALLOWED.items():
        if module == layer.rstrip(".") or (layer.endswith(".") and module.startswith(layer)):
            return any(target == t or (t.endswith(".") and target.startswith(t)) for t in targets)
    return False


def cycles(graph):
    """Each import circle once, as a list of modules."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def main():
    ours = modules()
    problems = []
    graph = {}
    for name, path in sorted(ours.items()):
        lines = sum(1 for _ in open(path))
        print("%5d %s" % (lines, os.path.relpath(path, ROOT)))
        if lines > MAX_LINES:
            problems.append("%s has %d lines (at most %d)" % (name, lines, MAX_LINES))
        targets, bad = imports(name, path, ours)
        problems += bad
        # `import oomscope._hooks.x` imports its packages too: only the deepest is an arrow.
        targets = {t for t in targets if not any(o.startswith(t + ".") for o in targets)}
        graph[name] = targets
        for target in sorted(targets):
            if not allowed(name, target):
                problems.append("%s imports %s: the arrow runs the wrong way" % (name, target))
    for circle in cycles(graph):
        problems.append("import circle: " + " -> ".join(circle))
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
