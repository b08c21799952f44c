"""Agents: networks, replay (storage × sampler), DQN (with its curiosity model), epoch monitor, model files."""
