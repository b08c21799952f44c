"""Backtesting: the windowed evaluator, per-window risk metrics (+ float64 reference) and reports."""
