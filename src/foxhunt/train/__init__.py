"""Training: graph capture helper, walk-forward runner, checkpoints, logs."""
