"""The Hub's HTTP client as this package uses it: a time limit on every request, and token-free
error text. Low in the import levels, so ``publish``, ``diff`` and ``remote`` (which validates a
Hub revision and is used by ``publish`` after a push) can all use it."""

from __future__ import annotations

import contextlib
from typing import Iterator

import httpx2


def redact(text: str, token: str | None) -> str:
    """``text`` with every occurrence of the token replaced."""
    return text.replace(token, "<token>") if token else text



class _TimeoutTransport(httpx2.BaseTransport):
    """Gives every request a connect, read, write and pool timeout of at most ``timeout`` seconds."""

    def __init__(self, inner: httpx2.BaseTransport, timeout: float):
        self.inner, self.timeout = inner, timeout

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        limits = dict(request.extensions.get("timeout") or {})
        for key in ("connect", "read", "write", "pool"):
            value = limits.get(key)
            limits[key] = self.timeout if value is None else min(value, self.timeout)
        request.extensions["timeout"] = limits
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@contextlib.contextmanager
def hub_timeout(timeout: float) -> Iterator[None]:
    """Every request of huggingface_hub's shared client inside the block gets ``timeout`` seconds
    (positive: ``push`` checks it) per connect, read and write (the client's own default is no
    limit); restored after."""
    import huggingface_hub.utils._http as hub_http

    previous = hub_http._GLOBAL_CLIENT_FACTORY

    def factory() -> httpx2.Client:
        client = previous()
        client.timeout = httpx2.Timeout(timeout)
        # HfApi passes timeout=None (no limit) on each request, which overrides the client's
        # default; the transports see the request's final timeouts and put the limit back there.
        client._transport = _TimeoutTransport(client._transport, timeout)
        client._mounts = {pattern: _TimeoutTransport(transport, timeout) if transport is not None else None
                          for pattern, transport in client._mounts.items()}
        return client

    hub_http.set_client_factory(factory)
    try:
        yield
    finally:
        hub_http.set_client_factory(previous)
