"""Who refers to an object, for the leak census's holders (`held`), from as few scans as can be.

`gc.get_referrers` reads every object the garbage collector tracks whatever it looks for (~14 ms
for the 160 000 a bare `import torch` makes, ~100 ms in a large program), and one scan finds the
referrers of many objects as cheaply as of one. Asked one object at a time, a pair of counts in a
serving loop scanned ~500 times (7.6 s of a 25 s run). `Referrers` asks for all the objects a
step of the search will need at once and keeps the answers for the rest of the search: the sampled
new tensors of every group in one scan, each level of the containers that hold them in one more.

What it keeps refers to the program's objects strongly: it lives for one search and is dropped
before the hook returns to the program (`held.grown`).
"""

import gc


class Referrers:
    """The referrers of objects, each scan shared by every object asked in it."""

    def __init__(self, ignore=()):
        self.known = {}  # id(obj) -> [referrer]: the answer for each object asked
        self.ignore = set(ignore)  # our own lists (the census's), never a referrer
        self.ignore.add(id(self.known))
        self.scans = 0

    def fetch(self, objs):
        """Scans once for the referrers of every object in `objs` not asked before (`objs`
        itself, the caller's list, is not one)."""
        want = []
        ids = set()
        for o in objs:
            if id(o) not in self.known and id(o) not in ids:
                ids.add(id(o))
                want.append(o)
        if not want:
            return
        # A tuple: `gc.get_referrers(*want)` then passes it as it is (where the call builds one
        # of its own, as 3.13's vectorcall may, only that one is skipped by gc itself).
        want = tuple(want)
        ours = self.ignore | {id(want), id(objs)}
        found = {i: [] for i in ids}
        for lst in found.values():
            self.ignore.add(id(lst))
        self.scans += 1
        for r in gc.get_referrers(*want):
            if id(r) in ours:
                continue
            if len(want) == 1:
                found[id(want[0])].append(r)
                continue
            hit = set()
            for x in gc.get_referents(r):
                i = id(x)
                if i in ids and i not in hit:
                    hit.add(i)
                    found[i].append(r)
        self.known.update(found)

    def of(self, obj):
        """The objects that refer to `obj` (one scan the first time it is asked alone)."""
        if id(obj) not in self.known:
            self.fetch([obj])
        return self.known[id(obj)]
