"""GPU-resident DQN: collector, learner (with the on-device guard), trainer; fused-op adapters
(fused: the acting adapter; fused_step); steps captured in CUDA graphs (``foxhunt.accel.graphs``)."""
