"""The learning scorecard: known-oracle markets, baselines, gates and reports (`foxhunt scorecard`)."""
