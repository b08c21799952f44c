"""Agents: networks, replay (storage × sampler), DQN, PPO, curiosity."""
