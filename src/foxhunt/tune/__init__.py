"""Hyperparameter search across walk-forward folds with Optuna (``foxhunt tune``).

config.py   the [tune] section and [tune.space] parsing      space.py    Optuna distributions
objective.py fold-aggregated score, constraints, moments      stats.py    deflated Sharpe, PBO
study.py    storage / sampler / pruner / study                worker.py   trial evaluation + ask-tell loop
holdout.py  the untouched hold-out and its one evaluation     session.py  study directory, workers, progress
finish.py   outputs after the search                           outputs.py  trials.csv, best.toml, statistics
report.py   report.html                                        cli_cmd.py  the command
"""
