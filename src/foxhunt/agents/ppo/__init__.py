"""PPO: actor-critic on the same vectorised env, rollouts [T, N] and GAE on the device."""
