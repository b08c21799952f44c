"""Triton kernels, each beside the torch function it must equal. A leaf: imports nothing of ours."""
