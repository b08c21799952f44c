"""Training: the walk-forward runner, checkpoints of component state, logs, report, `foxhunt train`."""
