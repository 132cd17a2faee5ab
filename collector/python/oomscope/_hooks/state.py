"""What the hooks know of the program, one object per process (`S`), in parts named for what they
follow. A forked child (a DataLoader worker, a fork-started rank) starts over (`after_fork`),
keeping what describes the program rather than this process's progress: the models found, the
optimizers made, the hooks in place, what the program marks itself.

Why fields on small classes with `__slots__`: the hooks read them ~6 times a training step, and a
slot is read faster than a dict entry; the parts keep each hook's state next to its siblings'.
"""


class Forward:
    """The outermost forward under way, and which modules are hooked (see `forward`)."""

    __slots__ = ("depth", "outer_emits", "outer_phase", "outer_frozen", "outer_module",
                 "outer_exc", "in_train_call", "roots", "since_new_root", "mode",
                 "global_handles", "root_handles", "root_hook_ids", "frozen_hooks", "wrapping",
                 "with_params")

    def __init__(self):
        self.depth = 0
        self.outer_emits = False
        self.outer_phase = "train"
        self.outer_frozen = False
        self.outer_module = 0  # id() of the module of the current outermost forward
        self.outer_exc = None  # id() of the exception being handled when it started
        self.in_train_call = 0
        # Weak references to the modules seen as outermost forwards with parameters (weak: a
        # model the program drops must be freed as it would be without us).
        self.roots = []
        self.since_new_root = 0
        self.mode = "search"  # or "roots"
        self.global_handles = []
        self.root_handles = []
        self.root_hook_ids = {}  # id(root module) -> ids of our hooks on it
        # Whether the hooks in place stay as they are: a compiled graph guards on them.
        self.frozen_hooks = False
        # id() of the module whose compiled call our eager wrapper is running (its own hooks,
        # inside the call, are not a second forward: `modules.patch_compile`).
        self.wrapping = 0
        # id() -> weak reference of the modules found to have parameters: an outermost forward
        # under the global hooks (a compiled program keeps them) asks at every call.
        self.with_params = {}

    def after_fork(self):
        self.depth = 0
        self.outer_module = 0
        self.outer_exc = None
        self.in_train_call = 0
        self.since_new_root = 0


class Loop:
    """Where the training loop is: its step, phase and stage, and the optimizers that end an
    iteration (see `optimizer`)."""

    __slots__ = ("step", "step_pending", "iterations", "stage", "last_phase", "in_opt_step",
                 "opt_outer", "has_optimizer", "optimizers", "idle", "stepped", "repeats",
                 "opt_steps_applied", "train_forward_in_step", "frozen_seq", "frozen_prefix",
                 "backward_done", "bw_task", "evals", "eval_notes", "marking", "mark_every",
                 "mark_phase", "iteration_s", "iteration_end_s", "sampled", "loader_starts",
                 "last_loader", "train_loader", "epoch")

    def __init__(self):
        self.step = 0
        self.step_pending = False
        self.iterations = 0  # iterations ended (every optimizer stepped)
        self.stage = None  # of the last mark sent
        self.last_phase = None  # of the last mark sent
        self.in_opt_step = 0
        self.opt_outer = 0  # id() of the optimizer of the outermost step in progress
        self.has_optimizer = False  # a torch.optim.Optimizer was created
        # Every one created: id() -> a weak reference (never kept alive by us). Not a WeakSet:
        # iterating one at each iteration's end cost ~5 us in a training loop.
        self.optimizers = {}
        self.idle = set()  # id()s of created ones set aside (see `optimizer.iteration_done`)
        self.stepped = set()  # id()s of the optimizers stepped since the iteration began
        self.repeats = {}  # id() -> its steps since the iteration began
        self.opt_steps_applied = 0
        self.train_forward_in_step = False  # a training forward since the last optimizer step
        self.frozen_seq = []  # id()s of the frozen forwards since then, before a training one
        self.frozen_prefix = None  # the ones the last step began with (None: no step yet)
        self.backward_done = False  # a backward ended since the last training forward
        self.bw_task = None  # the autograd graph task whose backward was marked
        self.evals = 0  # eval forwards seen
        self.eval_notes = set()  # the autograd states of eval forwards already sent
        # Whether this iteration's training marks are sent (`budget`), one in `mark_every`
        # counted from iteration `mark_phase`; the running iteration time and the last end.
        self.marking = True
        self.mark_every = 1
        self.mark_phase = 0
        self.iteration_s = None
        self.iteration_end_s = 0.0
        self.sampled = False  # marks were thinned out at some point (`budget`)
        # DataLoader iterators begun (`epochs`): id() of a loader -> how many times; the loader
        # begun last; the one the training forwards follow (its restarts are epochs); the epoch.
        self.loader_starts = {}
        self.last_loader = None
        self.train_loader = None
        self.epoch = 0

    def after_fork(self):
        kept = (self.has_optimizer, self.optimizers, self.idle)
        self.__init__()
        self.has_optimizer, self.optimizers, self.idle = kept


class Program:
    """What the program marks itself (through `oomscope`): its own marks win over ours."""

    __slots__ = ("stages", "emitted", "steps", "phases", "components")

    def __init__(self):
        self.stages = set()  # stages it marks
        self.emitted = {}  # stage -> step we last marked it at (until the program marks it)
        self.steps = False  # it says its steps
        self.phases = False  # it says its phases
        self.components = False  # it sends its own breakdown

    def after_fork(self):
        self.emitted = {}


class Inputs:
    """The training step's input (see `inputs`)."""

    __slots__ = ("pending", "shape", "largest", "step", "usual_elements")

    def __init__(self):
        self.pending = False  # a training forward's input not found yet
        self.shape = None  # the last input shape sent
        self.largest = None  # (elements, shape) of this step's largest input so far
        self.step = None  # the step `largest` belongs to
        self.usual_elements = 0  # a running mean of the steps' inputs (`budget`)

    def after_fork(self):
        self.__init__()


class Memory:
    """What the model's memory is and what holds a leak (see `memory`)."""

    __slots__ = ("breakdown_at", "breakdown_not_before", "breakdown_sent", "stage_breakdown_at",
                 "stage_sent", "oom_breakdown", "modules", "modules_prune_at", "registry",
                 "watch", "epoch_count", "eval_watch", "eval_watch_step", "eval_watch_base",
                 "eval_sent", "optimizers_seen", "readings_paced_until",
                 "eval_moment_not_before")

    def __init__(self):
        self.breakdown_at = 1  # the iteration that measures the breakdown next (then x4)
        self.breakdown_not_before = 0.0  # ...and not before this time (`BREAKDOWN_COST_FACTOR`)
        self.breakdown_sent = None  # the last breakdown sent
        # What the optimizers held at the last breakdown: (groups, parameters with state) each.
        self.optimizers_seen = None
        self.stage_breakdown_at = None  # the iteration whose every stage sends what changed
        self.stage_sent = None  # (gradients, per-optimizer state) last sent in it
        self.oom_breakdown = False  # a breakdown was sent at an OOM
        # The modules made since torch was imported: id() -> a weak reference (not a WeakSet:
        # a module class with `__eq__` and no `__hash__` cannot be in a set).
        self.modules = {}
        self.modules_prune_at = 1024  # entries at which the dead ones are dropped (then 2x left)
        self.registry = False  # whether the module registry is in place
        self.watch = None  # `held.Watch`: when to count live tensors
        # (step, {container: name, type, length, size}) at the last epoch start (`epochs`).
        self.epoch_count = None
        # The current eval's own leak watch (`memory.at_eval_forward`), the step it is at, and
        # the eval forwards seen before its first batch.
        self.eval_watch = None
        self.eval_watch_step = None
        self.eval_watch_base = 0
        self.eval_sent = False  # a breakdown went out at an eval's start (`memory`)
        # No watch reads memory before this time (`held.READING_COST_SHARE`): one pace for
        # every watch, an eval's new one included.
        self.readings_paced_until = 0.0
        # No eval's start sends the moment's breakdown before this (`BREAKDOWN_COST_FACTOR`):
        # a loop whose every step runs a no-grad forward (an agent acting) starts an eval a step.
        self.eval_moment_not_before = 0.0

    def after_fork(self, watch):
        kept = (self.modules, self.registry)
        self.__init__()
        self.modules, self.registry = kept
        self.watch = watch


class Cuda:
    """CUDA, once the program initialised it (never by us; see `cuda`)."""

    __slots__ = ("ready", "snapshot", "snapshot_prefix")

    def __init__(self):
        self.ready = False
        self.snapshot = False  # --oom-snapshot: the allocator's history is recorded
        # Where the first OOM's whole memory snapshot goes: this prefix, the pid, `.pickle`.
        self.snapshot_prefix = None

    def after_fork(self):
        self.ready = False
        self.snapshot_prefix = None


class State:
    """The hooks' state (`S`): torch and the probe, whether this process marks (`active`: None
    until its first mark decides), and the parts."""

    __slots__ = ("torch", "probe", "active", "paused", "fwd", "loop", "program", "inputs",
                 "memory", "cuda")

    def __init__(self):
        self.torch = None
        self.probe = None
        self.active = None
        self.paused = False
        self.fwd = Forward()
        self.loop = Loop()
        self.program = Program()
        self.inputs = Inputs()
        self.memory = Memory()
        self.cuda = Cuda()

    def step_field(self):
        """The step a record of the hooks carries: none once the program says its own steps."""
        return None if self.program.steps else self.loop.step

    def after_fork(self, watch):
        self.active = None
        self.fwd.after_fork()
        self.loop.after_fork()
        self.program.after_fork()
        self.inputs.after_fork()
        self.memory.after_fork(watch)
        self.cuda.after_fork()


S = State()
