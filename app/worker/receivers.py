"""Receiver hosts that keep timing out, as one callback sender sees them (#29).

A receiver (the sender names it: a tenant's host and port) whose callbacks time out
``STRIKES`` times in a row is backed off: one attempt at a time goes to it (a probe), and
its other deliveries are given back unsent, due again when the back-off ends (``1 s``
doubled per further timeout, at most ``MAX_WAIT_S``). Any answer from it (a 2xx, any
status) ends the back-off. Nothing is dropped: a deferred delivery
counts no attempt and comes due again, so at least once still holds::

    hosts = ReceiverHosts()
    wait = hosts.defer("hooks.example.com")   # None: send now; else seconds to wait
    ...
    hosts.done("hooks.example.com", timed_out=True)
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

STRIKES: Final = 3
FIRST_WAIT_S: Final = 1.0
MAX_WAIT_S: Final = 60.0
# Hosts remembered at most (the least recently seen forgotten first): memory stays bounded
# whatever hosts tenants name.
MAX_HOSTS: Final = 10_000


@dataclass(slots=True)
class _Host:
    timeouts: int = 0  # in a row
    until: float = 0.0  # backed off until (monotonic)
    probing: int = 0  # attempts in flight while backed off


class ReceiverHosts:
    """Consecutive timeouts per receiver host, and whether to send to it now."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._hosts: OrderedDict[str, _Host] = OrderedDict()
        self._clock = clock
        self._rng = rng or random.Random()

    def defer(self, host: str) -> float | None:
        """``None``: send to ``host`` now (then call ``done``); else seconds to defer it."""
        state = self._hosts.get(host)
        if state is None or state.timeouts < STRIKES:
            if state is not None:
                state.probing += 1
            return None
        now = self._clock()
        if state.probing == 0 and now >= state.until:
            state.probing += 1
            return None  # the probe
        # Until the back-off ends (or the probe has had its time), spread out.
        left = max(state.until - now, FIRST_WAIT_S)
        return left + self._rng.uniform(0, left / 2)

    def done(self, host: str, *, timed_out: bool) -> None:
        """How an attempt that ``defer`` let through went."""
        state = self._hosts.get(host)
        if state is None:
            if not timed_out:
                return
            state = self._hosts[host] = _Host()
            if len(self._hosts) > MAX_HOSTS:
                self._hosts.popitem(last=False)
        else:
            self._hosts.move_to_end(host)
            state.probing = max(0, state.probing - 1)
        if not timed_out:
            del self._hosts[host]
            return
        state.timeouts += 1
        if state.timeouts >= STRIKES:
            wait = min(FIRST_WAIT_S * 2.0 ** (state.timeouts - STRIKES), MAX_WAIT_S)
            state.until = self._clock() + wait

    def backed_off(self, host: str) -> bool:
        """Whether ``host`` is backed off now (for logs and tests)."""
        state = self._hosts.get(host)
        return state is not None and state.timeouts >= STRIKES
