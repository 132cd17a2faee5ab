"""The helper's former name: `import oomscope_probe` is `import oomscope` (one module)."""

import sys

import oomscope

sys.modules[__name__] = oomscope
