"""The way one pool's GitHub calls go: the CA bundle they trust and the proxy they go through.

Why per call and not per process: pools name their GitHub (``spec.githubApiUrl``), its CA
(``spec.githubServerTLS``) and their proxy (``spec.proxy``); the operator's own CA and proxy
(the chart's values: ``REQUESTS_CA_BUNDLE``, ``HTTPS_PROXY``, ...) stay the default for pools
that set neither. A client is made per route (``runnerpool.github.credentials.ClientCache``
keys them by ``Route.digest``), and ``PyGithubClient`` runs each call inside ``route.used()``:
``runnerpool.github.transport.BoundedAdapter`` then sends that thread's requests, the GitHub
App token mint among them, with the route's ``verify`` and proxies.

A route holds the proxy credentials in its proxy URLs: its ``repr`` and ``digest`` never show
them (the digest is a hash, for cache keys and file names).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MAX_CA_FILES", "Route", "active"]

_current = threading.local()
_FILES_LOCK = threading.Lock()
#: CA bundle files kept (the newest): each is the public bundle (~290 KiB) plus a pool's CAs,
#: and the directory is the operator pod's /tmp, an emptyDir of 64 MiB. Routes come and go with
#: tenants' ConfigMaps: a few pools whose CA is rewritten every minute made a new file each
#: time, none ever deleted, until the kubelet evicted the operator.
MAX_CA_FILES = 32


@dataclass(frozen=True)
class Route:
    """``ca_pem``: PEM certificates trusted besides the public CAs; ``proxies``: (scheme, URL)
    pairs (``http``, ``https``); ``no_proxy``: hosts reached directly, as ``no_proxy`` lists them;
    ``tenant``: the namespace whose pool the calls are for (the slow-host gate holds a tenant
    whose calls ran out of their deadline to one call at a time: ``runnerpool.github.transport``).
    The digest leaves the tenant out: clients are cached per namespace already."""

    ca_pem: str | None = field(default=None, repr=False)
    proxies: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    no_proxy: tuple[str, ...] = ()
    tenant: str = ""

    @functools.cached_property
    def digest(self) -> str:
        data = repr((self.ca_pem, self.proxies, self.no_proxy)).encode()
        return hashlib.sha256(data).hexdigest()

    def __repr__(self) -> str:
        return f"Route(digest={self.digest[:12]}, ca={self.ca_pem is not None}, proxied={bool(self.proxies)})"

    @property
    def verify(self) -> str | None:
        """A file with the operator's CAs and the pool's (``requests`` takes a path), or ``None``.

        The operator's: ``REQUESTS_CA_BUNDLE`` (the chart's ``githubServerTLS``) when set, as
        ``requests`` itself reads it, else the public CAs (certifi). Written when missing, so
        that at most ``MAX_CA_FILES`` are kept (the oldest go) and a route whose file went gets
        it back at its next call.
        """
        if self.ca_pem is None:
            return None
        path = _ca_dir() / f"{self.digest}.pem"
        if not path.exists():
            with _FILES_LOCK:
                if not path.exists():
                    _write_bundle(path, self.ca_pem)
                    _prune(path.parent, keep=path)
        return str(path)

    def proxies_for(self, url: str) -> dict[str, str] | None:
        """The proxies for ``url``; ``None`` leaves the operator's own (its environment)."""
        if not self.proxies:
            return None
        import requests.utils  # noqa: PLC0415 - requests is loaded with PyGithub

        if self.no_proxy and requests.utils.should_bypass_proxies(url, no_proxy=",".join(self.no_proxy)):
            return {}
        return dict(self.proxies)

    @contextlib.contextmanager
    def used(self) -> Iterator[None]:
        """This thread's requests inside the block take this route."""
        outer = active()
        _current.route = self
        try:
            yield
        finally:
            _current.route = outer


def active() -> Route | None:
    """The route of the call this thread is in, if any."""
    return getattr(_current, "route", None)


def _write_bundle(path: Path, ca_pem: str) -> None:
    import certifi  # noqa: PLC0415 - only pools with a CA need it

    public = Path(os.environ.get("REQUESTS_CA_BUNDLE") or certifi.where()).read_text()
    partial = path.with_suffix(".tmp")
    partial.write_text(public.rstrip("\n") + "\n" + ca_pem.strip() + "\n")
    partial.replace(path)


def _prune(directory: Path, keep: Path) -> None:
    """The newest ``MAX_CA_FILES`` bundles stay (``keep`` always)."""
    found = sorted(directory.glob("*.pem"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in [p for p in found if p != keep][MAX_CA_FILES - 1 :]:
        old.unlink(missing_ok=True)


@functools.cache
def _ca_dir() -> Path:
    """A directory of the operator's own, readable by it alone."""
    return Path(tempfile.mkdtemp(prefix="runnerpool-ca-", dir=os.environ.get("TMPDIR")))
