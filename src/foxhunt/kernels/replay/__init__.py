"""The fused replay trees: ``binary`` (the sum / min tree's descent and ancestor rebuild) and
``wide`` (the 32-ary tree's). Adapter: ``foxhunt.agents.replay.fused``."""
