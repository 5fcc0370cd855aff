"""The paged KV pool: pages that are re-let without wiping, and the prefix (radix) cache.

Content is tracked per page, not per token: `content[page]` is the id of whatever wrote the page
last (a request's content id, a shared document's id, or 0 for never written). Freeing a page
only marks it free; its content stays until someone writes over it. That is the whole leak:
a request that attends over pages it never wrote reads whatever an earlier request left there.

Free pages are handed out lowest index first (the allocator keeps its free list sorted), so a
page freed a moment ago is the first to be re-let — as it is in the engine when the pool is
mostly idle.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Pages = npt.NDArray[np.int64]

FREE = -1
CACHED = -2


class PagedKVPool:
    """A node's KV pool of `num_pages` pages of `page_size` tokens."""

    def __init__(self, capacity_tokens: int, page_size: int) -> None:
        self.page_size = page_size
        self.num_pages = max(1, capacity_tokens // page_size)
        self.content = np.zeros(self.num_pages, dtype=np.int64)
        self.owner = np.full(self.num_pages, FREE, dtype=np.int64)
        self._free = np.ones(self.num_pages, dtype=np.bool_)
        self.free_pages = self.num_pages
        self._hint = 0

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    @property
    def capacity_tokens(self) -> int:
        return self.num_pages * self.page_size

    @property
    def used_tokens(self) -> int:
        return (self.num_pages - self.free_pages) * self.page_size

    def alloc(self, n_pages: int, owner: int) -> Pages | None:
        """The `n_pages` lowest free pages, now owned by `owner`; None if there are not enough."""
        if n_pages > self.free_pages:
            return None
        if n_pages == 0:
            return np.empty(0, dtype=np.int64)
        hint = self._hint
        window = max(4 * n_pages, 2048)
        while True:
            stop = min(self.num_pages, hint + window)
            found = np.flatnonzero(self._free[hint:stop])
            if len(found) >= n_pages or stop == self.num_pages:
                break
            window *= 4
        pages = (found[:n_pages] + hint).astype(np.int64)
        self._free[pages] = False
        self.owner[pages] = owner
        self.free_pages -= n_pages
        # every free page below the last one taken has just been taken: a valid lower bound
        self._hint = int(pages[-1]) + 1
        return pages

    def free(self, pages: Pages) -> None:
        """Return pages to the free list. Their content is left as it is (no wiping)."""
        if len(pages) == 0:
            return
        self._free[pages] = True
        self.owner[pages] = FREE
        self.free_pages += len(pages)
        low = int(pages.min())
        if low < self._hint:
            self._hint = low

    def set_owner(self, pages: Pages, owner: int) -> None:
        self.owner[pages] = owner

    def write(self, pages: Pages, content_id: int) -> None:
        self.content[pages] = content_id


@dataclass(slots=True)
class CacheEntry:
    pages: Pages
    refs: int = 0


class RadixCache:
    """Prefix cache over shared documents: a cached prefix is reused instead of recomputed.

    Keyed by document id; an entry holds the pages of the document's whole pages. Entries nobody
    is using are evicted least recently used first when the pool runs short.
    """

    def __init__(self, pool: PagedKVPool) -> None:
        self.pool = pool
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()
        self.cached_pages = 0

    def match(self, doc_id: int) -> CacheEntry | None:
        entry = self._entries.get(doc_id)
        if entry is not None:
            self._entries.move_to_end(doc_id)
        return entry

    def insert(self, doc_id: int, pages: Pages) -> CacheEntry:
        entry = CacheEntry(pages=pages)
        self._entries[doc_id] = entry
        self.pool.set_owner(pages, CACHED)
        self.cached_pages += len(pages)
        return entry

    @property
    def evictable_pages(self) -> int:
        return sum(len(e.pages) for e in self._entries.values() if e.refs == 0)

    def evict(self, need_pages: int) -> int:
        """Free unused entries, oldest first, until `need_pages` pages are free."""
        freed = 0
        for doc_id in list(self._entries):
            if self.pool.free_pages >= need_pages:
                break
            entry = self._entries[doc_id]
            if entry.refs:
                continue
            del self._entries[doc_id]
            self.pool.free(entry.pages)
            self.cached_pages -= len(entry.pages)
            freed += len(entry.pages)
        return freed

    def alloc(self, n_pages: int, owner: int) -> Pages | None:
        pages = self.pool.alloc(n_pages, owner)
        if pages is None:
            self.evict(n_pages)
            pages = self.pool.alloc(n_pages, owner)
        return pages

    def clear(self) -> None:
        self._entries.clear()
        self.cached_pages = 0
