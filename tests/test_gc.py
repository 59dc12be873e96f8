"""``collector_paused``: the collector off inside the block, as it was after."""

from __future__ import annotations

import gc

import pytest

from evalledger._gc import collector_paused


@pytest.mark.parametrize("was_enabled", [True, False])
def test_the_collector_is_off_inside_and_as_it_was_after(was_enabled: bool) -> None:
    (gc.enable if was_enabled else gc.disable)()
    try:
        with pytest.raises(KeyError), collector_paused():
            assert not gc.isenabled()
            raise KeyError("an error inside the block")
        assert gc.isenabled() is was_enabled
    finally:
        gc.enable()
