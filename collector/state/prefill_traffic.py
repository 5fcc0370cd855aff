"""Which prefill node took a deployment's requests, minute by minute: how a prefill whose logs end
early is told to be gone (replaced) rather than unread.

A prefill pod replaced under a new name (a Kubernetes rollout, a crash and a new pod) leaves its
old pod's log ending mid-run with the small pool it ran. Read alone, that pool is "carried
forward": the status said "Possibly not over" and asked for the logs of a pod that no longer
existed, though every request after it went to the new pod (blind review 33: 12 of 55 layouts).
The requests tell: each answer's prefill is its prefill side read, else the node that had
announced the bootstrap address decode's answer names, and a node that took none after its last
line while others of its deployment took them was gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, TypeVar

from collector.state.request_record import RequestRecord

# Traffic is kept by the minute: a week is 10,080 minutes a node, whatever the request rate.
MINUTE: Final = 60.0
# Minutes kept for one node or address; past it, the earliest are let go (only the traffic after
# a node's last line is asked).
MAX_MINUTES: Final = 100_000
# Minutes of requests other nodes must have taken after a node's last line (and a margin for
# the hosts' clocks) before it is said to be replaced, as many as the node itself would have
# taken of them at its share of the deployment's traffic before.
MIN_MINUTES_TAKEN: Final = 3
CLOCK_MARGIN_SECONDS: Final = 120.0
# Bootstrap hosts whose first naming is kept (a deployment's prefill addresses).
MAX_HOSTS: Final = 4096

_K = TypeVar("_K")

# (decode node, bootstrap host, port): where a decode node's answers were prefilled, as named.
Address = tuple[str, str, int | None]
# (decode node, host, port, time) -> the prefill node decode's answer naming that address then
# went to, None when not known.
Resolve = Callable[[str, str, int | None, float], str | None]


class PrefillTraffic:
    """Of decode's answers (PD requests decode answered): per prefill node, the minutes it took
    them in (their prefill sides read); per decode node and the bootstrap address its answers
    name, the minutes of those with no prefill side read (resolved to a node by `replaced`,
    once every node's announcements are read); per decode node, the minutes of its answers
    that name no prefill at all."""

    __slots__ = ("by_node", "by_address", "unplaced", "first_named", "hosts_overflowed")

    def __init__(self) -> None:
        # Each minute kept with the latest time read in it: an address is resolved at that
        # time (a pod announced at 13:36:16 took the requests of 13:36:20).
        self.by_node: dict[str, dict[int, float]] = {}
        self.by_address: dict[Address, dict[int, float]] = {}
        self.unplaced: dict[str, dict[int, float]] = {}
        # The first minute an answer named each bootstrap host, its prefill side read or not.
        self.first_named: dict[str, int] = {}
        self.hosts_overflowed = False  # past `MAX_HOSTS`: no address is known to be new

    def note(self, record: RequestRecord) -> None:
        when = record.began
        if when is None:
            return
        serving = record.serving
        if serving is None or serving.role != "decode" or record.bootstrap_room is None:
            # Only an answer tells where the deployment's traffic went: with decode's request
            # lines not logged, a prefill whose log ends looks as gone as one that was.
            return
        minute = int(when // MINUTE)
        host = serving.bootstrap_host
        if host is not None:
            named = self.first_named.get(host)
            if named is None:
                if len(self.first_named) < MAX_HOSTS:
                    self.first_named[host] = minute
                else:
                    self.hosts_overflowed = True
            elif minute < named:
                self.first_named[host] = minute
        prefill = record.prefill
        if prefill is not None and not prefill.traced_only:
            _add(self.by_node, prefill.node, minute, when)
        elif host is not None:
            _add(self.by_address, (serving.node, host, serving.bootstrap_port), minute, when)
        else:
            _add(self.unplaced, serving.node, minute, when)

    def replaced(
        self,
        node: str,
        last_read: float,
        peers: Iterable[str],
        decodes: Iterable[str],
        resolve: Resolve,
    ) -> tuple[list[str], float] | None:
        """The prefill nodes of `node`'s deployment (`peers`, its decode nodes `decodes`) that
        took its requests after its last line at `last_read`, and the first minute they did:
        when it took none then and every answer of the deployment then is placed on one of
        them. None else: its logs may only have stopped being kept."""
        own = self.by_node.get(node)
        if own:
            # Its own requests read last, when later than the last line the caller dated it by
            # (blind review 62 D3: its time stats up to a watchdog's crash three minutes on,
            # counted as requests it took "after" its end, kept it from being replaced).
            last_read = max(last_read, max(own) * MINUTE)
        first = int((last_read + CLOCK_MARGIN_SECONDS) // MINUTE) + 1
        peers = set(peers) - {node}
        decodes = set(decodes)
        taken: dict[str, set[int]] = {}
        for prefill in (node, *peers):
            later = {m for m in self.by_node.get(prefill, ()) if m >= first}
            if later:
                taken[prefill] = later
        # Addresses answers named before the node's last line: one no node read announced may
        # be the node's own (its start-up lines rotated away, or spelt another way).
        named_before = {host for host, named in self.first_named.items() if named < first}
        for (decode, host, port), minutes in self.by_address.items():
            if decode not in decodes:
                continue
            for minute, latest in minutes.items():
                if minute >= first:
                    owner = resolve(decode, host, port, latest)
                    if owner is None and host not in named_before and not self.hosts_overflowed:
                        # A prefill at an address first named after the node's last line, its
                        # announcement not read (a new pod's start-up lines rotated away).
                        owner = f"the prefill at {host}"
                    elif owner not in peers:
                        return None  # its own, or a node whose pool no line tells
                    taken.setdefault(owner, set()).add(minute)
        if node in taken or any(
            m >= first for decode in decodes for m in self.unplaced.get(decode, ())
        ):
            return None
        if self._share(node, peers, first) * sum(map(len, taken.values())) < MIN_MINUTES_TAKEN:
            return None
        return sorted(taken), min(min(minutes) for minutes in taken.values()) * MINUTE

    def _share(self, node: str, peers: Iterable[str], first: int) -> float:
        """The part of its deployment's busy minutes before `first` that were `node`'s: what
        it would have taken of the minutes after, had it still been up (1 when its own
        requests were not read).

        Why: blind review 57, 2,000 prefill nodes taking three requests a day each: each one's
        hours without a request, while the others took some, said it was replaced."""
        own = sum(1 for minute in self.by_node.get(node, ()) if minute < first)
        if not own:
            return 1.0
        total = own + sum(
            1 for peer in peers for minute in self.by_node.get(peer, ()) if minute < first
        )
        return own / total


def _add(minutes_by: dict[_K, dict[int, float]], key: _K, minute: int, when: float) -> None:
    minutes = minutes_by.get(key)
    if minutes is None:
        minutes = minutes_by[key] = {}
    latest = minutes.get(minute)
    if latest is None:
        if len(minutes) >= MAX_MINUTES:
            del minutes[min(minutes)]
        minutes[minute] = when
    elif when > latest:
        minutes[minute] = when
