"""The fused training env step: ``kernel`` (one launch per step) and ``train`` (its training-only
device functions: barriers, reward modes, shaping, start sampling). Adapter: ``foxhunt.env.fused``."""
