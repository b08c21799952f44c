"""The fused backtest: ``kernel`` (the bar loop with the windows' state on chip) and ``host`` (its
argument bundles and precomputed arrays, torch only). Adapter: ``foxhunt.backtest.fused``."""
