"""foxhunt: GPU-resident reinforcement-learning trading agents and vectorised backtests.

Layers (dependencies flow down): config → data → features → folds → market → env → agents →
backtest → train → cli. ``accel`` (graph capture, Triton availability, backend resolution) sits
below every layer but ``kernels``, a leaf that imports nothing of ours.
"""

import os

# A fold's members run side by side, each on its own CUDA stream (foxhunt.train.lockstep). The CUDA driver
# maps streams onto 8 hardware work queues by default, so more than 8 members would queue behind each
# other's kernels on a shared queue; 32 queues (the most it allows) keep up to 32 members independent.
# Read once, when the process creates its CUDA context; a value set by the user wins.
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

__version__ = "0.1.0"
