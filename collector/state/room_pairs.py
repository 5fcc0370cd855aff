"""Which decode nodes' answers met a prefill side read: how a decode node is told to be served by
a prefill node whose logs are not in the input.

A decode answer with no prefill side read is judged against the largest prefill pool of its
deployment (`detectors.pool_in_force`). That is lenient when its prefill node is one of those
read; it is wrong when it is not. Two deployments of one model saved side by side, one without
its prefill's logs, had the other's small pool judge its decode: 51 honest answers named exposed
(blind review 8a). Rooms tell: where the prefill nodes read log every request's room and other
decode nodes' rooms meet them, a decode node none of whose rooms ever met one is served
elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from collector.state.config_timeline import normal_host
from collector.state.request_record import RequestRecord

# A decode node is said to be served elsewhere once this many of its answers with a room met
# no prefill side read, and none met one.
MIN_UNPAIRED: Final = 5
# Addresses kept for one prefill node (its NICs, its names).
MAX_HOSTS: Final = 16


class RoomPairs:
    """Per decode node, its answers (with a room) that met a prefill side read and those that did
    not; and the prefill nodes whose request lines some decode answer met. Counts only: bounded
    by the nodes."""

    __slots__ = (
        "paired",
        "unpaired",
        "hosts",
        "spelled",
        "partners",
        "met_at",
        "missed",
    )

    def __init__(self) -> None:
        self.paired: dict[str, int] = {}
        self.unpaired: dict[str, int] = {}
        # The bootstrap hosts decode answers named when they met a prefill node's request
        # lines, by that node: the addresses it is reached at (at most `MAX_HOSTS` a node).
        self.hosts: dict[str, set[str]] = {}
        # The same, as the answers spelled them.
        self.spelled: dict[str, set[str]] = {}
        # The decode nodes whose answers met a prefill node's request lines, by prefill node:
        # its keys, the prefill nodes some answer met.
        self.partners: dict[str, set[str]] = {}
        # The prefill nodes a decode node's answers met, by decode node and the bootstrap host
        # they named (as spelled: one node's answers spell it one way).
        self.met_at: dict[str, dict[str | None, set[str]]] = {}
        # A decode node's answers that met no prefill side, by decode node and host named.
        self.missed: dict[tuple[str, str | None], int] = {}

    def note(self, record: RequestRecord) -> None:
        serving = record.serving
        if serving is None or serving.role != "decode" or record.bootstrap_room is None:
            return
        prefill = record.prefill
        if prefill is None:
            self.unpaired[serving.node] = self.unpaired.get(serving.node, 0) + 1
            key = (serving.node, serving.bootstrap_host)
            self.missed[key] = self.missed.get(key, 0) + 1
        elif not prefill.traced_only:
            self.paired[serving.node] = self.paired.get(serving.node, 0) + 1
            if prefill.has_finish or prefill.has_stats or prefill.received_time is not None:
                # Its request lines name rooms. A refusal line names a rid at most: a prefill
                # that logs only its refusals meets no room of the requests it takes, and every
                # decode node it serves looked served elsewhere (blind review 8c E12).
                host = serving.bootstrap_host
                self.partners.setdefault(prefill.node, set()).add(serving.node)
                self.met_at.setdefault(serving.node, {}).setdefault(host, set()).add(prefill.node)
                spelled = self.spelled.setdefault(prefill.node, set())
                if host is not None and host not in spelled and len(spelled) < MAX_HOSTS:
                    # Each spelling once: normalising an address costs more than the rest.
                    spelled.add(host)
                    normal = normal_host(host)
                    if normal is not None:
                        self.hosts.setdefault(prefill.node, set()).add(normal)

    def host_elsewhere(self, host: str, prefills: Iterable[str]) -> bool:
        """Whether `host` is none of `prefills`' (those read of a deployment): each of them was
        met at the hosts answers named, and `host` is none of those.

        Why: blind review 10b, a decode served by two prefill nodes, one's logs missing: the
        answers naming the missing node's address were judged against the other's pool."""
        read = list(prefills)
        normal = normal_host(host)
        return bool(read) and all(
            self.hosts.get(node) and normal not in self.hosts[node] for node in read
        )

    def undecided(self, decode: str, prefills: Iterable[str]) -> bool:
        """Whether `decode` would be served elsewhere (`served_elsewhere`) but for too few of its
        answers read yet: none met a prefill side, fewer than `MIN_UNPAIRED` did not."""
        read = list(prefills)
        return (
            bool(read)
            and self.paired.get(decode, 0) == 0
            and self.unpaired.get(decode, 0) < MIN_UNPAIRED
            and all(node in self.partners for node in read)
        )

    def served_elsewhere(self, decode: str, prefills: Iterable[str]) -> bool:
        """Whether `decode` is served by a prefill node none of `prefills` (those read of its
        deployment): each of them met another decode node's rooms, and none of `decode`'s, of
        which at least `MIN_UNPAIRED` met no prefill side."""
        read = list(prefills)
        return (
            bool(read)
            and self.paired.get(decode, 0) == 0
            and self.unpaired.get(decode, 0) >= MIN_UNPAIRED
            and all(node in self.partners for node in read)
        )

    def stranger(self, owner: str, decode: str, host: str) -> bool | None:
        """Whether `owner`, the node read that announced `host`, is not the prefill node that
        decode node `decode`'s answers naming `host` went to: its request lines met other
        decode nodes' rooms, never `decode`'s, and `decode`'s answers naming `host` met another
        node's or, `MIN_UNPAIRED` of them at least, none read. None while too few tell.

        Why: blind review 27, two deployments of one model whose prefill nodes announce the
        same addresses, one's oldest prefill rotation gone: every answer of its decode nodes
        before the first line kept was judged against the other deployment's large pool, and
        58 exposures were named by their timing alone (one not at all)."""
        partners = self.partners.get(owner)
        if not partners or decode in partners:
            return False
        if self.met_at.get(decode, {}).get(host):
            return True
        return True if self.missed.get((decode, host), 0) >= MIN_UNPAIRED else None

    def met_by(self, decode: str, host: str) -> frozenset[str]:
        """The prefill nodes read whose request lines `decode`'s answers naming `host` met."""
        return frozenset(self.met_at.get(decode, {}).get(host, ()))
