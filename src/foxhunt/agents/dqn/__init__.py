"""GPU-resident DQN: collector, learner, guard and epoch monitor, captured in CUDA graphs."""
