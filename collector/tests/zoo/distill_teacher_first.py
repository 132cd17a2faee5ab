"""`distill_teacher.py` with the teacher run first in each step, before the student's forward
(a common order in hand-written distillation loops).

EXPECT = {
    "absent": ["eval-peak", "eval-retains-memory", "leak"],
    "no_words": ["eval"],
    "evals": 0,
}
"""

import sys

import distill_teacher

if __name__ == "__main__":
    sys.argv.append("--teacher-first")
    distill_teacher.main()
