"""The pages last answered (runners, workflow runs, jobs; a repository's visibility, as a page of
one), kept to be revalidated with their ETags (a 304 is free)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_CACHED_PAGES", "Page", "PageCache"]

#: ETag'd pages kept per client. A page is a few kilobytes; this bounds a client that
#: lists thousands of repositories without evicting anything in ordinary use.
MAX_CACHED_PAGES = 2048


@dataclass(frozen=True)
class Page:
    """One page as last answered, its items parsed, kept to be revalidated with its ETag."""

    etag: str
    items: tuple[Any, ...]
    next_url: str | None
    #: The listing's ``total_count`` when the page said it (runners' pages do).
    total: int | None = None


class PageCache:
    """Bounded LRU of pages by URL; shared by the threads that use one client."""

    def __init__(self, max_pages: int = MAX_CACHED_PAGES) -> None:
        self._pages: OrderedDict[str, Page] = OrderedDict()
        self._max = max_pages
        self._lock = threading.Lock()

    def get(self, url: str) -> Page | None:
        with self._lock:
            page = self._pages.get(url)
            if page is not None:
                self._pages.move_to_end(url)
            return page

    def put(self, url: str, page: Page) -> None:
        with self._lock:
            self._pages[url] = page
            self._pages.move_to_end(url)
            while len(self._pages) > self._max:
                self._pages.popitem(last=False)
