"""Benchmark scripts (run on the GPU machine): ``PYTHONPATH=src:. python -m bench.<name>``.

``bench.common`` is the one harness: timing, machine + revision facts, JSON output, the random
market and the DQN trainer builders every script uses.
"""
