"""tpo-bench's harness: Hydra entry point, trainer, outputs, logging, optimizers and the paper report.

Importing it asks PyTorch's CPU allocator for transparent huge pages on tensors of 2 MB or more
(``THP_MEM_ALLOC_ENABLE``, read at the first such allocation): the MNIST bandit gathers random rows of a 157 MB image
table every step, and with 4 KB pages each row is a TLB miss (20 seeds: 8.8 → 7.4 ms per step). Set the variable
to 0 to opt out.
"""

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
