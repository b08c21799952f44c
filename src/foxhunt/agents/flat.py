"""Flat parameters and a masked, capturable Adam.

All parameters of a module are re-homed into one contiguous buffer (each ``Parameter`` becomes a
view of it, and so does its ``.grad``). Gradient clipping, the guard, Adam and the target-network
update then run as a few whole-buffer kernels, and a *masked* step (``ok`` = 0) leaves parameters,
Adam moments and target weights bitwise unchanged: every update is ``torch.where(ok, new, old)``,
so NaNs in a bad step's gradient never leak into the state.
"""

from __future__ import annotations

import torch
from torch import nn

from foxhunt.state import load_into


class FlatParams:
    """One flat float32 buffer holding every parameter of ``module`` and one for the gradients."""

    def __init__(self, module: nn.Module) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise ValueError("module has no trainable parameters")
        device = params[0].device
        total = sum(p.numel() for p in params)
        self.module = module
        self.data = torch.empty(total, dtype=torch.float32, device=device)
        self.grad = torch.zeros(total, dtype=torch.float32, device=device)
        offset = 0
        for p in params:
            n = p.numel()
            self.data[offset : offset + n].copy_(p.detach().reshape(-1))
            p.data = self.data[offset : offset + n].view_as(p)
            p.grad = self.grad[offset : offset + n].view_as(p)
            offset += n
        self.numel = total

    def zero_grad(self) -> None:
        """Zero the gradient buffer in place (the per-parameter .grad views stay attached)."""
        self.grad.zero_()

    def reattach_grads(self) -> None:
        """Re-point every .grad at the flat buffer (after code that set grads to None)."""
        offset = 0
        for p in self.module.parameters():
            if p.requires_grad:
                n = p.numel()
                p.grad = self.grad[offset : offset + n].view_as(p)
                offset += n


class MaskedAdam:
    """Adam over a FlatParams buffer whose every update is masked by a device flag.

    lr: 0-d float32 device tensor (a schedule may change it in place). The step counter is a device
    tensor too, so the whole step can be captured in a CUDA graph and replayed.
    """

    def __init__(self, flat: FlatParams, lr: torch.Tensor, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        self.flat = flat
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.weight_decay = weight_decay
        dev = flat.data.device
        self.m = torch.zeros_like(flat.data)
        self.v = torch.zeros_like(flat.data)
        self.step_count = torch.zeros((), dtype=torch.float32, device=dev)
        # Created once: a Python scalar turned into a tensor inside a captured step would be a copy.
        self._beta1 = torch.tensor(self.beta1, dtype=torch.float32, device=dev)
        self._beta2 = torch.tensor(self.beta2, dtype=torch.float32, device=dev)

    def reset(self) -> None:
        """Zero moments and the step counter in place (a new fold)."""
        self.m.zero_()
        self.v.zero_()
        self.step_count.zero_()

    def step(self, grad: torch.Tensor, ok: torch.Tensor) -> None:
        """One Adam step with gradient ``grad`` ([P], already clipped) applied only where ``ok``.

        ok: 0-d bool device tensor. When False, nothing changes, bitwise.
        """
        g = torch.where(ok, grad, torch.zeros_like(grad))
        if self.weight_decay:
            g = g + self.weight_decay * self.flat.data
        t = self.step_count + ok.float()
        m_new = self.m * self.beta1 + g * (1.0 - self.beta1)
        v_new = self.v * self.beta2 + g * g * (1.0 - self.beta2)
        bc1 = 1.0 - torch.pow(self._beta1, t.clamp_min(1.0))
        bc2 = 1.0 - torch.pow(self._beta2, t.clamp_min(1.0))
        update = (m_new / bc1) / ((v_new / bc2).sqrt() + self.eps) * self.lr
        self.flat.data.copy_(torch.where(ok, self.flat.data - update, self.flat.data))
        self.m.copy_(torch.where(ok, m_new, self.m))
        self.v.copy_(torch.where(ok, v_new, self.v))
        self.step_count.copy_(t)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The live moments and step count (``foxhunt.state`` convention)."""
        return {"adam_m": self.m, "adam_v": self.v, "adam_step": self.step_count}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        load_into("MaskedAdam", self.state_dict(), state)
