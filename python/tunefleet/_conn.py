"""One WebSocket connection to a master's `/ws/client` (docs/PROTOCOL.md
section 3): `hello`, requests correlated by `id`, and the subscription stream.

A reader task owns the socket's receiving side: replies resolve the request
waiting for their `id`; snapshots and events go to every listener queue.
Reading all the time also keeps the connection alive (the master pings
clients, and a library answers pings only while it reads)."""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl

from .errors import ConnectionLost, TunefleetError

PROTOCOL_VERSION = 1
CLIENT_PATH = "/ws/client"

# Close codes after which connecting again with the same settings cannot help.
FATAL_CLOSE = {
    4000: "protocol version mismatch: upgrade the tunefleet package (or the master)",
    4001: "unauthorized: wrong or missing token",
    4002: "handshake refused",
}


def endpoint_url(server: str) -> str:
    """`ws://h:p` -> `ws://h:p/ws/client`; `http(s)://` is taken as `ws(s)://`."""
    if not isinstance(server, str) or not server.strip():
        raise TunefleetError(f"invalid server URL {server!r}: expected ws://HOST:PORT")
    url = server.strip().rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep or not rest:
        raise TunefleetError(f"invalid server URL {server!r}: expected ws://HOST:PORT")
    scheme = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme.lower())
    if scheme not in ("ws", "wss"):
        raise TunefleetError(f"invalid server URL {server!r}: the scheme must be ws:// or wss://")
    if not rest.endswith(CLIENT_PATH):
        rest += CLIENT_PATH
    return f"{scheme}://{rest}"


class Connection:
    """An open, authenticated client connection."""

    def __init__(self, ws, url: str):
        self.ws = ws
        self.url = url
        self.role: str | None = None
        self.server_version: str | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self.listeners: set[asyncio.Queue] = set()
        self.closed: TunefleetError | None = None
        self._reader: asyncio.Task | None = None

    @classmethod
    async def open(cls, server: str, token: str | None, ca_file: str | None, client_name: str,
                   timeout: float = 10.0) -> Connection:
        try:
            from websockets.asyncio.client import connect as ws_connect
        except ImportError:  # websockets < 13
            from websockets import connect as ws_connect
        url = endpoint_url(server)
        ssl_context = ssl.create_default_context(cafile=ca_file) if url.startswith("wss://") else None
        try:
            # Results and snapshots of big fleets outgrow the default 1 MiB.
            ws = await asyncio.wait_for(
                ws_connect(url, max_size=1 << 30, ssl=ssl_context, open_timeout=timeout), timeout)
        except ssl.SSLCertVerificationError as err:
            raise TunefleetError(
                f"the master's certificate at {url} is not trusted ({err.verify_message}); for a "
                "self-signed certificate or a private CA pass ca_file=PEM") from err
        except (OSError, asyncio.TimeoutError) as err:
            raise ConnectionLost(f"cannot reach the master at {url}: {err or 'timed out'}") from err
        except Exception as err:  # websockets' InvalidStatus (403, 503), InvalidURI...
            raise ConnectionLost(f"cannot open a WebSocket to {url}: {err}") from err
        conn = cls(ws, url)
        conn._reader = asyncio.get_running_loop().create_task(conn._read())
        hello = {"type": "hello", "protocol": PROTOCOL_VERSION, "client": client_name}
        if token:
            hello["token"] = token
        try:
            welcome = await conn.request(hello, timeout=timeout)
        except BaseException:
            await conn.close()
            raise
        if welcome.get("protocol") != PROTOCOL_VERSION:
            await conn.close()
            raise TunefleetError(
                f"the master speaks protocol {welcome.get('protocol')}, this client {PROTOCOL_VERSION}: "
                "upgrade the tunefleet package (or the master)", "protocol_mismatch")
        conn.role = welcome.get("role")
        conn.server_version = welcome.get("server_version")
        return conn

    async def close(self) -> None:
        try:
            await self.ws.close()
        except Exception:  # noqa: BLE001  (already gone)
            pass
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 2)
            except BaseException:  # noqa: BLE001
                self._reader.cancel()

    def _fail_all(self, err: TunefleetError) -> None:
        self.closed = err
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(err)
        self._waiting.clear()
        for q in list(self.listeners):
            q.put_nowait(err)

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for text in self.ws:
                if isinstance(text, bytes):
                    text = text.decode("utf-8", "replace")
                try:
                    msg = json.loads(text)
                except ValueError:
                    continue
                self._dispatch(msg)
            rcvd = getattr(self.ws, "close_code", None)
            reason = getattr(self.ws, "close_reason", "") or ""
            self._fail_all(self._closed_error(rcvd, reason))
        except ConnectionClosed as e:
            rcvd = e.rcvd
            self._fail_all(self._closed_error(rcvd.code if rcvd else None, rcvd.reason if rcvd else ""))
        except Exception as e:  # noqa: BLE001  (socket errors)
            self._fail_all(ConnectionLost(f"connection to {self.url} lost: {e}"))

    def _closed_error(self, code, reason) -> TunefleetError:
        if code in FATAL_CLOSE:
            err = TunefleetError(f"the master closed the connection ({code}, {FATAL_CLOSE[code]}): {reason}",
                                 "unauthorized" if code == 4001 else "handshake")
            err.close_code = code
            return err
        return ConnectionLost(f"the master at {self.url} closed the connection ({code}): {reason}".rstrip(": "),
                              close_code=code)

    def _dispatch(self, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "reply" or (kind == "error" and msg.get("id") is not None):
            fut = self._waiting.pop(msg.get("id"), None)
            if fut is None or fut.done():
                return
            if kind == "reply":
                fut.set_result(msg.get("body") or {})
            else:
                fut.set_exception(TunefleetError(msg.get("message", ""), msg.get("code")))
        elif kind in ("snapshot", "event"):
            for q in list(self.listeners):
                q.put_nowait(msg)
        elif kind == "shutdown":
            # The close (1001) follows; waiting requests fail then.
            for q in list(self.listeners):
                q.put_nowait(msg)
        elif kind == "error":
            # id null: a request the master could not read. Ours are always
            # valid JSON, so fail the oldest waiting request with it.
            if self._waiting:
                first = min(self._waiting)
                fut = self._waiting.pop(first)
                if not fut.done():
                    fut.set_exception(TunefleetError(msg.get("message", ""), msg.get("code")))

    async def request(self, command: dict, timeout: float | None = 120.0) -> dict:
        """Sends one request; returns its reply's `body` or raises the
        master's `error` as TunefleetError."""
        if self.closed is not None:
            raise self.closed
        request_id = next(self._ids)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting[request_id] = fut
        # One deadline for the send and the reply: a master that stopped
        # reading (stuck, or cut off once the socket's buffers are full)
        # would otherwise hold the send, which no reply timeout covers.
        deadline = None if timeout is None else loop.time() + timeout
        try:
            await asyncio.wait_for(self.ws.send(json.dumps({"id": request_id, **command})), timeout)
        except asyncio.TimeoutError:
            self._waiting.pop(request_id, None)
            lost = ConnectionLost(f"the master at {self.url} took no {command.get('type')} request "
                                  f"within {timeout} s")
            self._fail_all(lost)
            # Dropped at once: a close handshake would queue behind the
            # unsent bytes and wait out its own timeout before a reconnect.
            transport = getattr(self.ws, "transport", None)
            if transport is not None:
                transport.abort()
            raise lost from None
        except Exception as err:  # noqa: BLE001
            self._waiting.pop(request_id, None)
            lost = ConnectionLost(f"connection to {self.url} lost: {err}")
            # Marked here, not only by the reader: a send can fail before the
            # reader task has run, and a resending caller that found this
            # connection still open would retry on it without ever yielding
            # (a busy loop seen when a master was killed mid-test).
            self._fail_all(lost)
            raise lost from err
        try:
            return await asyncio.wait_for(fut, None if deadline is None else max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            self._waiting.pop(request_id, None)
            raise TunefleetError(f"no answer to {command.get('type')} from {self.url} within {timeout} s") from None
