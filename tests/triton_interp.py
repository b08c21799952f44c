"""A test-process speed-up of the Triton interpreter (TRITON_INTERPRET=1): no re-patching of
``triton.language`` at each device-function call inside a running launch.

Triton's interpreter (3.x, ``triton.runtime.interpreter``) swaps the language's builtins for
interpreted ones at each launch (``GridExecutor.__call__``: ``_patch_lang``, restored when the
launch ends), and again at every call of a ``@triton.jit`` device function inside the kernel
(``InterpretedFunction.__call__``), with a patch scope that is dropped unrestored. Inside a launch
the language is already patched: the nested pass (``inspect.getmembers`` over tl, tl.core,
tl.tensor, tl.math; ~300 attributes) finds no builtin left to swap and sets the same interpreted
``tl.tensor`` / ``tl.core`` helpers again. It costs ~40 % of an interpreted kernel's time.

``install()`` wraps ``_patch_lang`` so that such a nested call is skipped when the running launch's
patch already covers the language modules the device function sees (its globals' ``tl`` /
``tl.core``); any other call is Triton's own. The launch's patch and restore, and the device
functions themselves, are unchanged: kernels compute the same values
(tests/kernels/test_triton_interp.py checks outputs bitwise with and without it, and that the
language is restored after a launch). The CLI's subprocesses never install it.

Installed by tests/conftest.py for in-process tests, only where the interpreter module is loaded
and its code has the shape this relies on (``supported()``); otherwise Triton runs as shipped.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

_ORIGINAL: dict[str, Any] = {}
_pending: list[bool] = []  # one per running launch: True until the launch's own _patch_lang call
_covered: list[set[int]] = []  # one per running launch: ids of the language modules patched for it
skipped = [0]  # nested patches skipped so far (the transparency test checks that some were)


class _Skip:
    """The scope of a skipped nested patch (Triton drops nested scopes without restoring them)."""

    def restore(self) -> None:
        pass


def _interpreter():
    return sys.modules.get("triton.runtime.interpreter")


def supported() -> bool:
    """The loaded interpreter has the two ``_patch_lang`` call sites this wrapper relies on."""
    interp = _interpreter()
    if interp is None or not hasattr(interp, "_patch_lang") or not hasattr(interp, "GridExecutor"):
        return False
    try:
        grid = inspect.getsource(_ORIGINAL.get("grid_call", interp.GridExecutor.__call__))
        nested = inspect.getsource(interp.InterpretedFunction.__call__)
    except (OSError, TypeError):
        return False
    return "patch_scope = _patch_lang(self.fn)" in grid and "patch_scope.restore()" in grid \
        and "_patch_lang(self.fn)" in nested


def installed() -> bool:
    return bool(_ORIGINAL)


def install() -> bool:
    """Wrap the loaded interpreter (idempotent); False (nothing changed) when unsupported."""
    if _ORIGINAL:
        return True
    if not supported():
        return False
    interp = _interpreter()
    import triton.language as tl

    patch_lang, grid_call = interp._patch_lang, interp.GridExecutor.__call__

    def langs_of(fn) -> set[int]:
        return {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)}

    def wrapped_patch_lang(fn):
        if _pending and _pending[-1]:  # the launch's own patch (restored by the launch)
            _pending[-1] = False
            scope = patch_lang(fn)
            _covered[-1] = langs_of(fn)
            return scope
        if _covered and langs_of(fn) <= _covered[-1]:  # nested: already patched for this launch
            skipped[0] += 1
            return _Skip()
        scope = patch_lang(fn)
        if _covered:
            _covered[-1] |= langs_of(fn)
        return scope

    def wrapped_grid_call(self, *args, **kwargs):
        _pending.append(True)
        _covered.append(set())
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            _pending.pop()
            _covered.pop()

    _ORIGINAL.update(patch_lang=patch_lang, grid_call=grid_call)
    interp._patch_lang = wrapped_patch_lang
    interp.GridExecutor.__call__ = wrapped_grid_call
    return True


def uninstall() -> None:
    """Put Triton's own functions back."""
    if not _ORIGINAL:
        return
    interp = _interpreter()
    interp._patch_lang = _ORIGINAL.pop("patch_lang")
    interp.GridExecutor.__call__ = _ORIGINAL.pop("grid_call")
