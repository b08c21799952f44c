"""foxhunt: GPU-resident reinforcement-learning trading agents and vectorised backtests.

Layers (dependencies flow down): config → data → features → folds → market → env → agents →
train / backtest → hyperopt → cli.  ``kernels`` is a leaf that imports nothing of ours.
"""

__version__ = "0.1.0"
