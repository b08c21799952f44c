"""Shared by several fused ops: the env step's device functions (``env``: the backtest and the
training env step), the dueling network's (``dueling``: the backtest and acting kernels) and its
host-side packing (``packing``, torch only), and the replay tree's host-side prefix expressions
(``prefix``, torch only: the fused descent and its torch reference share them)."""
