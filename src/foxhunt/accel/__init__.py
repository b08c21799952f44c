"""Execution backends: how the layers above run, decided in one place.

* ``graphs``  — the one CUDA-graph capture helper (``capture``, ``GraphedStep``) that every captured
  path uses (DQN rounds and train steps, env step graphs, backtest chunks, graphed metrics);
* ``triton``  — whether Triton kernels are usable on a device: compiled, interpreted, or not (why);
* ``config``  — the ``[accel]`` config section (``backend``, ``matmul_precision``, per-part overrides);
* ``backend`` — the resolver turning the configuration into a per-component ``ExecutionPlan``.

This package sits below every layer but ``kernels`` (it imports ``foxhunt.config`` /
``foxhunt.errors`` and, lazily, ``foxhunt.kernels._triton``); it reads the other layers' config
sections by attribute only.
"""
