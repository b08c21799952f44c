"""The fused acting op: ``kernel`` (the dueling MLP's forward, its row max and argmax in one
launch). Adapter: ``foxhunt.agents.dqn.fused``."""
