#!/usr/bin/env python3
"""A scripted tunefleet client: submit workload files, follow the run, write CSV.

    python tunefleet_client.py --server ws://127.0.0.1:18871 --token T \\
        submit workloads.yaml --out results.csv

It speaks the public WebSocket protocol (docs/PROTOCOL.md, JSON Schema in
docs/protocol.schema.json) with nothing but the `websockets` package
(`pip install websockets`), and shows what every client must do:

- `hello` first; every request carries an `id` and gets exactly one `reply`
  or `error` with that `id` (`Connection.request`);
- subscribe *before* submitting, so no event of our jobs is missed; keep a
  mirror of the jobs, **replace** it on every `snapshot`, and when an event's
  `seq` skips a number, ask for a fresh snapshot (`subscribe` again);
- stop when every submitted job is `done`, `failed` or `cancelled`, fetch the
  results, and write them as CSV with the same columns as
  `tunefleet results --format csv`.

Exit status: 0 when every job is done, 2 when some failed or were cancelled,
1 for errors (connection, token, invalid workload file, timeout).

`--token` defaults to $TUNEFLEET_TOKEN, `--server` to $TUNEFLEET_SERVER;
`--ca-cert PEM` (or $TUNEFLEET_CA_CERT) trusts a private CA or a self-signed
master certificate for wss://.
"""

import argparse
import asyncio
import collections
import decimal
import json
import os
import ssl
import sys

try:
    from websockets.asyncio.client import connect as ws_connect
except ImportError:  # websockets < 13
    from websockets import connect as ws_connect
from websockets.exceptions import ConnectionClosed

PROTOCOL_VERSION = 1
CLIENT_PATH = "/ws/client"
TERMINAL = {"done", "failed", "cancelled"}
CSV_HEADER = [
    "job_id", "name", "op", "shape", "dtype", "state", "attempts", "worker",
    "best_latency_s", "gflops", "trials_done", "trials_total",
]
# Close codes after which retrying with the same settings cannot help.
CLOSE_REASONS = {
    1008: "policy violation",
    1009: "message too big",
    4000: "protocol version mismatch: upgrade this client",
    4001: "unauthorized: wrong or missing token",
    4002: "handshake refused",
}


class TunefleetError(Exception):
    """An error reply (`code` is the protocol's machine-readable code) or a
    connection-level failure (`code` is None)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


def endpoint_url(server):
    """`ws://h:p` -> `ws://h:p/ws/client`; http(s) is taken as ws(s)."""
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


def describe_error(msg):
    """`code: message`, without repeating a code the message already starts with."""
    code, message = msg["code"], msg["message"]
    return message if message.startswith(code + ":") else f"{code}: {message}"


class Connection:
    """One client connection: requests by id, and the subscription stream.

    Snapshots and events that arrive while a request waits for its reply are
    queued, in order, for `next_update`.
    """

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 1
        self.pending = collections.deque()
        self.role = None

    @classmethod
    async def open(cls, server, token=None, ca_cert=None, name="tunefleet_client.py"):
        url = endpoint_url(server)
        ssl_context = None
        if url.startswith("wss://"):
            ssl_context = ssl.create_default_context(cafile=ca_cert)
        # Snapshots and results of big fleets outgrow the default 1 MiB limit.
        ws = await ws_connect(url, max_size=1 << 30, ssl=ssl_context)
        conn = cls(ws)
        hello = {"type": "hello", "protocol": PROTOCOL_VERSION, "client": name}
        if token:
            hello["token"] = token
        welcome = await conn.request(hello)
        if welcome.get("kind") != "welcome":
            raise TunefleetError(f"unexpected answer to hello: {welcome}")
        if welcome.get("protocol") != PROTOCOL_VERSION:
            raise TunefleetError(
                f"the master speaks protocol {welcome.get('protocol')}, this client "
                f"{PROTOCOL_VERSION}: upgrade the client",
                "protocol_mismatch",
            )
        conn.role = welcome["role"]
        return conn

    async def close(self):
        await self.ws.close()

    async def _recv(self, timeout=None):
        try:
            text = await asyncio.wait_for(self.ws.recv(), timeout)
        except ConnectionClosed as e:
            rcvd = e.rcvd
            if rcvd is None:
                raise TunefleetError("the master closed the connection") from None
            why = CLOSE_REASONS.get(rcvd.code, "closed")
            raise TunefleetError(
                f"the master closed the connection ({rcvd.code} {why}): {rcvd.reason}"
            ) from None
        if isinstance(text, bytes):
            text = text.decode()
        return json.loads(text)

    async def request(self, command, timeout=120):
        """Sends one request and returns its reply body; raises TunefleetError
        for an `error` with our id."""
        request_id = self.next_id
        self.next_id += 1
        await self.ws.send(json.dumps({"id": request_id, **command}))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise TunefleetError(f"no reply to {command['type']} within {timeout} s")
            msg = await self._recv(left)
            kind = msg.get("type")
            if kind == "reply" and msg.get("id") == request_id:
                return msg["body"]
            if kind == "error" and msg.get("id") in (request_id, None):
                raise TunefleetError(describe_error(msg), msg["code"])
            if kind in ("snapshot", "event"):
                self.pending.append(msg)
            elif kind == "shutdown":
                raise TunefleetError(f"the master is shutting down: {msg.get('reason')}")
            # Anything else (a stale reply) is ignored; unknown types too.

    async def next_update(self, timeout=None):
        """The next `snapshot` or `event` message."""
        while True:
            msg = self.pending.popleft() if self.pending else await self._recv(timeout)
            kind = msg.get("type")
            if kind in ("snapshot", "event"):
                return msg
            if kind == "shutdown":
                raise TunefleetError(f"the master is shutting down: {msg.get('reason')}")
            if kind == "error" and msg.get("id") is None:
                raise TunefleetError(describe_error(msg), msg["code"])


class Mirror:
    """The subscriber's copy of the jobs, kept in step by `seq`."""

    def __init__(self):
        self.jobs = {}
        self.last_seq = None

    def apply(self, msg):
        """Applies a snapshot or an event; returns False when events were missed."""
        seq = msg["seq"]
        if msg["type"] == "snapshot":
            # Replace, never merge.
            self.jobs = {job["job_id"]: job for job in msg["snapshot"]["jobs"]}
            self.last_seq = seq
            return True
        if self.last_seq is None or seq <= self.last_seq:
            return True  # already in the snapshot we have
        in_order = seq == self.last_seq + 1
        event = msg["event"]
        if event.get("kind") == "job_updated":
            job = event["job"]
            self.jobs[job["job_id"]] = job  # the full job
        elif event.get("kind") == "job_progress":
            p = event["progress"]  # a delta for a running job
            job = self.jobs.get(p["job_id"])
            if job is not None:
                job.update(state="running", trials_done=p["trials_done"],
                           trials_total=p["trials_total"],
                           best_latency_s=p["best_latency_s"], updated_at=p["updated_at"])
        self.last_seq = seq
        return in_order


def op_and_shape(workload):
    """`op` and `shape` columns, as the Rust side writes them."""
    op = workload["op"]
    s = workload.get("shape") or {}

    def conv(inp, out):
        k, st, p, d = s["kernel"], s["stride"], s["padding"], s["dilation"]
        return (f"{inp[0]}x{inp[1]}x{inp[2]}x{inp[3]} k{k[0]}x{k[1]} s{st[0]}x{st[1]} "
                f"p{p[0]}x{p[1]} d{d[0]}x{d[1]} -> {out}")

    if op == "matmul":
        shape = f"m={s['m']} n={s['n']} k={s['k']}"
    elif op == "batch_matmul":
        shape = f"batch={s['batch']} m={s['m']} n={s['n']} k={s['k']}"
    elif op == "dense":
        shape = f"batch={s['batch']} in={s['in_features']} out={s['out_features']}"
    elif op == "conv2d_nchw":
        shape = conv([s["batch"], s["in_channels"], s["height"], s["width"]], s["out_channels"])
    elif op == "conv2d_nhwc":
        shape = conv([s["batch"], s["height"], s["width"], s["in_channels"]], s["out_channels"])
    elif op == "depthwise_conv2d_nchw":
        shape = conv([s["batch"], s["channels"], s["height"], s["width"]],
                     s["channels"] * s["multiplier"])
    elif op == "tvmscript":
        text = workload.get("tvmscript", "")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        name = None
        for line in lines:
            rest = line.lstrip()
            if rest.startswith("def "):
                candidate = rest[4:].split("(")[0].strip()
                if 0 < len(candidate) <= 64 and all(c.isalnum() or c == "_" for c in candidate):
                    name = candidate
                    break
        lines = len(lines)
        shape = f"tvmscript {name} ({lines} lines)" if name else f"tvmscript ({lines} lines)"
    else:
        shape = ""
    return op, shape


def flops(workload):
    op, s = workload["op"], workload.get("shape") or {}
    if op == "matmul":
        return 2.0 * s["m"] * s["n"] * s["k"]
    if op == "batch_matmul":
        return 2.0 * s["batch"] * s["m"] * s["n"] * s["k"]
    if op == "dense":
        return 2.0 * s["batch"] * s["in_features"] * s["out_features"]
    if op in ("conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw"):
        out_hw = []
        for i, size in enumerate((s["height"], s["width"])):
            padded = size + 2 * s["padding"][i]
            effective = s["dilation"][i] * (s["kernel"][i] - 1) + 1
            if s["stride"][i] == 0 or effective > padded:
                return None
            out_hw.append((padded - effective) // s["stride"][i] + 1)
        kh, kw = s["kernel"]
        if op == "depthwise_conv2d_nchw":
            return 2.0 * s["batch"] * s["channels"] * s["multiplier"] * out_hw[0] * out_hw[1] * kh * kw
        return 2.0 * s["batch"] * s["out_channels"] * out_hw[0] * out_hw[1] * s["in_channels"] * kh * kw
    return None


def gflops(job):
    reported = (job.get("result") or {}).get("gflops")
    if reported is not None:
        return reported
    latency, f = job.get("best_latency_s"), flops(job["workload"])
    if latency and latency > 0 and f:
        return f / latency / 1e9
    return None


def plain_number(x):
    """A float without an exponent, shortest round-trip digits (Rust's `{}`)."""
    text = format(decimal.Decimal(repr(float(x))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def csv_field(value):
    value = str(value)
    if any(c in value for c in ',"\n\r') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value


def csv_rows(jobs):
    yield CSV_HEADER
    for job in jobs:
        op, shape = op_and_shape(job["workload"])
        latency = job.get("best_latency_s")
        g = gflops(job)
        yield [
            job["job_id"], job["name"], op, shape, job["workload"]["dtype"], job["state"],
            job["attempts"], job.get("worker") or "",
            "" if latency is None else plain_number(latency),
            "" if g is None else f"{g:.3f}",
            job["trials_done"], job["trials_total"],
        ]


def write_csv(jobs, path):
    text = "".join(",".join(csv_field(f) for f in row) + "\n" for row in csv_rows(jobs))
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)


def log(message):
    print(message, file=sys.stderr, flush=True)


async def submit_and_follow(args):
    conn = await Connection.open(args.server, args.token, args.ca_cert)
    try:
        if conn.role != "admin":
            raise TunefleetError("submitting needs the admin token (--token or TUNEFLEET_TOKEN)",
                                 "forbidden")
        # Subscribe first: every change to the jobs we are about to create is
        # then either in the snapshot or in an event after it.
        mirror = Mirror()
        await conn.request({"type": "subscribe"})
        mine = []
        for path in args.files:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            report = await conn.request(
                {"type": "submit", "yaml": text, "filename": os.path.basename(path)})
            log(f"{path}: {len(report['new_jobs'])} new jobs, "
                f"{len(report['duplicates'])} already known")
            mine += report["new_jobs"] + report["duplicates"]
        mine = list(dict.fromkeys(mine))
        if not mine:
            raise TunefleetError("the files hold no workloads")

        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.timeout
        last_line = None
        while True:
            states = [mirror.jobs[j]["state"] for j in mine if j in mirror.jobs]
            if len(states) == len(mine) and all(s in TERMINAL for s in states):
                break
            counts = collections.Counter(states)
            line = (f"{counts['done']}/{len(mine)} done, "
                    f"{counts['running'] + counts['assigned']} running, "
                    f"{counts['failed']} failed")
            if line != last_line:
                log(line)
                last_line = line
            left = deadline - loop.time()
            if left <= 0:
                raise TunefleetError(f"not finished within {args.timeout} s ({line})")
            try:
                msg = await conn.next_update(timeout=left)
            except asyncio.TimeoutError:
                continue
            if not mirror.apply(msg):
                # Missed events: ask for a fresh snapshot on the same connection.
                log(f"missed events before seq {msg['seq']}; resynchronising")
                await conn.request({"type": "subscribe"})

        jobs = await conn.request({"type": "results", "job_ids": mine})
        jobs = jobs["jobs"]
    finally:
        await conn.close()
    write_csv(jobs, args.out)
    counts = collections.Counter(job["state"] for job in jobs)
    log(f"done: {counts['done']}, failed: {counts['failed']}, "
        f"cancelled: {counts['cancelled']}; wrote {args.out}")
    return 0 if counts["done"] == len(jobs) else 2


async def results(args):
    conn = await Connection.open(args.server, args.token, args.ca_cert)
    try:
        body = await conn.request({"type": "results"})
    finally:
        await conn.close()
    write_csv(body["jobs"], args.out)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("TUNEFLEET_SERVER", "ws://127.0.0.1:18871"))
    parser.add_argument("--token", default=os.environ.get("TUNEFLEET_TOKEN"),
                        help="admin token (default: $TUNEFLEET_TOKEN)")
    parser.add_argument("--ca-cert", default=os.environ.get("TUNEFLEET_CA_CERT") or None,
                        help="PEM file with the CA to trust for wss://")
    commands = parser.add_subparsers(dest="command", required=True)
    submit = commands.add_parser("submit", help="submit files, follow until done, write CSV")
    submit.add_argument("files", nargs="+", metavar="FILE")
    submit.add_argument("--out", default="-", help="CSV file (default: standard output)")
    submit.add_argument("--timeout", type=float, default=24 * 3600,
                        help="give up after this many seconds")
    export = commands.add_parser("results", help="write every job's result as CSV")
    export.add_argument("--out", default="-")
    args = parser.parse_args(argv)
    try:
        if args.command == "submit":
            return asyncio.run(submit_and_follow(args))
        return asyncio.run(results(args))
    except TunefleetError as e:
        log(f"error: {e}")
        return 1
    except (OSError, ssl.SSLError) as e:
        log(f"error: cannot talk to {args.server}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
