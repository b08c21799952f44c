"""The bars' content hash (feature-cache key, --resume's data check) names the values only."""

from __future__ import annotations

import dataclasses

import numpy as np

from foxhunt.data.synthetic import generate_bars


def test_content_hash_ignores_byte_order_layout_and_source_and_sees_every_value():
    bars = generate_bars(500, seed=3)
    ref = bars.content_hash()
    swapped = dataclasses.replace(
        bars, timestamps=bars.timestamps.astype(">i8"), close=bars.close.astype(">f8"),
        open=np.asfortranarray(bars.open[::-1])[::-1], source="elsewhere.csv",
    )
    assert swapped.content_hash() == ref
    changed = bars.close.copy()
    changed[250] = np.nextafter(changed[250], np.inf)
    assert dataclasses.replace(bars, close=changed).content_hash() != ref
    assert dataclasses.replace(bars, has_volume=not bars.has_volume).content_hash() != ref
