"""GPU-resident DQN: collector, learner (with the on-device guard), trainer; fused-op adapters
(fused_acting, fused_step); steps captured in CUDA graphs (``foxhunt.accel.graphs``)."""
