"""One client request as both halves of a PD deployment see it.

Prefill and decode each know the request under their own rid; the shared `bootstrap_room` is
what pairs them (the rendezvous), exactly as in the engine. One record holds both halves so the
model can move KV content from one pool to the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.content import PromptSpec
from simulator.pool import CacheEntry, Pages
from simulator.traffic import RequestFault

if TYPE_CHECKING:
    from simulator.decode import DecodeNode
    from simulator.prefill import PrefillNode

# (status, body) handed back to whoever waits on a half (the live HTTP handler)
Reply = Callable[[int, dict[str, Any]], None]


@dataclass(slots=True, eq=False)
class SimRequest:
    serial: int
    room: int
    cid: int
    spec: PromptSpec
    max_tokens: int
    temperature: float = 0.7
    stream: bool = False
    fault: RequestFault | None = None
    doc_cid: int = 0
    out_tokens: int = 0
    t_route: float = 0.0
    text_head: str = ""
    aborted: bool = False

    # prefill half
    p_node: PrefillNode | None = None
    p_gen: int = 0
    p_rid: str = ""
    p_client: str = ""
    p_obj: str = ""
    p_status: str = "none"
    t_p_recv: float = 0.0
    stub: bool = False
    refusal: str = ""
    p_len: int = 0
    cached: int = 0
    progress: int = 0
    p_own: Pages | None = None
    p_entry: CacheEntry | None = None
    p_doc_pages: int = 0
    t_bootstrapped: float = 0.0
    t_pf_start: float = -1.0
    t_pf_end: float = 0.0
    tx_cursor: float = 0.0
    tx_busy: float = 0.0
    t_tx_end: float = 0.0
    p_content: np.ndarray | None = None
    on_p_done: Reply | None = None
    p_trace: Any = None

    # decode half
    d_node: DecodeNode | None = None
    d_gen: int = 0
    d_rid: str = ""
    d_client: str = ""
    d_obj: str = ""
    d_status: str = "none"
    t_d_recv: float = 0.0
    d_pages: Pages | None = None
    t_d_alloc: float = 0.0
    t_dec_start: float = 0.0
    step_s: float = 0.0
    hits: list[tuple[int, int, float]] = field(default_factory=list)
    late_corrupted: bool = False
    on_d_done: Reply | None = None
    d_trace: Any = None

    @property
    def tokens(self) -> int:
        return self.spec.tokens
