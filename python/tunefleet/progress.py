"""Progress display for `wait(progress=True)`: a tqdm bar when tqdm is
installed (`tqdm.auto`, so notebooks get a widget), plain lines on stderr
otherwise. Fed by the event stream, never by polling."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, enabled: bool, desc: str, unit: str):
        self.enabled = enabled
        self.desc = desc
        self.unit = unit
        self.bar = None
        self.last_line = None
        self.last_status = None
        self.last_at = 0.0
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            self.bar = tqdm(total=0, desc=desc, unit=unit, dynamic_ncols=True)

    def update(self, done: int, total: int, status: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            if self.bar.total != total:
                self.bar.total = total
            self.bar.n = done
            self.bar.set_postfix_str(status, refresh=False)
            self.bar.refresh()
            return
        line = f"{self.desc}: {done}/{total} {self.unit} {status}"
        now = time.monotonic()
        # A line per change of state, at most one every 2 s otherwise.
        if line != self.last_line and (status != self.last_status or now - self.last_at >= 2.0):
            print(line, file=sys.stderr, flush=True)
            self.last_line, self.last_status, self.last_at = line, status, now

    def close(self, final: str | None = None) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            if final:
                self.bar.set_postfix_str(final)
            self.bar.close()
        elif final:
            print(f"{self.desc}: {final}", file=sys.stderr, flush=True)
