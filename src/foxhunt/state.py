"""Component state: the one convention every stateful component's ``state_dict`` follows.

A state dict is a flat ``{name: torch.Tensor}``: the component's live device tensors (no copies;
``load_state_dict`` copies into them in place, so captured CUDA graphs stay valid), generator
states as uint8 CPU tensors (``generator_state``), and host-known integers (ring positions,
counters the host keeps by construction) as 0-d int64 CPU tensors (``host_int``). Checkpoints
(``foxhunt.train.checkpoint``) store these dicts as safetensors and know nothing else of a
component. ``load_into`` is the shared loader: the same names, shapes and dtypes, or a ValueError
naming the first mismatch.
"""

from __future__ import annotations

from typing import Mapping

import torch

StateDict = dict[str, torch.Tensor]


class ComponentStateError(ValueError):
    """A state dict does not fit the component named ``component`` (the message says how)."""

    def __init__(self, component: str, message: str) -> None:
        super().__init__(f"component {component!r}: {message}")
        self.component = component


def host_int(value: int) -> torch.Tensor:
    """A host integer as a 0-d int64 CPU tensor (for a state dict)."""
    return torch.tensor(int(value), dtype=torch.int64)


def generator_state(gen: torch.Generator) -> torch.Tensor:
    """A generator's state (uint8 CPU tensor) for a state dict."""
    return gen.get_state()


def check_keys(who: str, live: Mapping[str, object], loaded: Mapping[str, torch.Tensor]) -> None:
    """The loaded dict has exactly the live dict's names (ValueError naming one that differs)."""
    if set(live) != set(loaded):
        missing = sorted(set(live) - set(loaded))
        extra = sorted(set(loaded) - set(live))
        what = f"missing {missing[0]!r}" if missing else f"unexpected {extra[0]!r}"
        raise ValueError(f"{who}: state does not match this component ({what})")


def load_into(who: str, live: Mapping[str, torch.Tensor], loaded: Mapping[str, torch.Tensor]) -> None:
    """Copy ``loaded`` into the ``live`` tensors in place after checking names, shapes and dtypes."""
    check_keys(who, live, loaded)
    for k, dst in live.items():
        src = loaded[k]
        if src.shape != dst.shape or src.dtype != dst.dtype:
            raise ValueError(f"{who}: tensor {k!r} is {src.dtype} {list(src.shape)}, this component has "
                             f"{dst.dtype} {list(dst.shape)}")
    with torch.no_grad():
        for k, dst in live.items():
            dst.copy_(loaded[k])


def set_generator(who: str, gen: torch.Generator, state: torch.Tensor) -> None:
    """Restore a generator (ValueError naming ``who`` when the state is rejected)."""
    try:
        gen.set_state(state)
    except RuntimeError as exc:
        raise ValueError(f"{who}: generator state rejected ({exc})") from None


def pack(tensors: Mapping[str, torch.Tensor], host: Mapping[str, int] | None = None,
         generators: Mapping[str, torch.Generator] | None = None) -> StateDict:
    """A state dict from live tensors, host integers and generators (names must not collide)."""
    out: StateDict = dict(tensors)
    out.update({k: host_int(v) for k, v in (host or {}).items()})
    out.update({k: generator_state(g) for k, g in (generators or {}).items()})
    return out


def unpack(who: str, state: Mapping[str, torch.Tensor], tensors: Mapping[str, torch.Tensor],
           host_keys: tuple[str, ...] = (), generators: Mapping[str, torch.Generator] | None = None) -> dict[str, int]:
    """Load ``state`` (a ``pack`` result of the same component): tensors copied in place, generators
    restored; returns the host integers by name (each a count: a negative one is refused).
    ValueError naming the first mismatch."""
    gens = dict(generators or {})
    check_keys(who, {**tensors, **dict.fromkeys(host_keys), **gens}, state)
    for k in host_keys:
        if state[k].dim() != 0 or state[k].dtype != torch.int64:
            raise ValueError(f"{who}: {k!r} must be a 0-d int64 host counter")
        if int(state[k]) < 0:
            raise ValueError(f"{who}: host counter {k!r} = {int(state[k])} is negative (a count is >= 0)")
    load_into(who, tensors, {k: state[k] for k in tensors})
    for k, g in gens.items():
        set_generator(f"{who}.{k}", g, state[k])
    return {k: int(state[k]) for k in host_keys}


def split(state: Mapping[str, torch.Tensor], prefix: str) -> StateDict:
    """The entries of ``state`` under ``prefix.`` with the prefix removed."""
    p = prefix + "."
    return {k[len(p):]: v for k, v in state.items() if k.startswith(p)}


def prefixed(prefix: str, state: Mapping[str, torch.Tensor]) -> StateDict:
    return {f"{prefix}.{k}": v for k, v in state.items()}


__all__ = ["ComponentStateError", "StateDict", "check_keys", "generator_state", "host_int", "load_into", "pack", "prefixed", "set_generator", "split",
           "unpack"]
