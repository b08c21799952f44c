"""foxhunt: GPU-resident reinforcement-learning trading agents and vectorised backtests.

Layers (dependencies flow down): config → data → features → folds → market → env → agents →
backtest → train → cli. ``accel`` (graph capture, Triton availability, backend resolution) sits
below every layer but ``kernels``, a leaf that imports nothing of ours.
"""

__version__ = "0.1.0"
