#!/usr/bin/env python3
"""What a re-render of the dashboard costs with a big fleet.

    .venv/bin/python scripts/bench-page-render.py http://HOST:PORT/

Opens the page in headless Chromium (through the DevTools protocol, with the
`websockets` package of the project's venv), waits for the jobs table, then
clicks controls that re-render the page (sort, filter chips, theme, a job,
"show more") five times each and prints how long each click took until the
next frame had been produced (requestAnimationFrame, then a task): the
app's update and render, and the browser's style, layout and paint.
It also prints when the first rows of the jobs table appeared (a DOM
observer installed before the page loads, so any build can be measured):
the first render with the fleet's jobs, from navigation start.
docs/benchmarks.md ("Without Yew", "Yew again") has the figures and the master it ran
against (a read-only master over 30,000 queued jobs:
scripts/bench-core-cost.sh makes that state).
"""
import asyncio, json, subprocess, sys, time, urllib.request
import websockets

URL = sys.argv[1]
PORT = 9333

async def main():
    chrome = subprocess.Popen(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
        f"--remote-debugging-port={PORT}", "--window-size=1400,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/json"))
                page = next(t for t in targets if t["type"] == "page")
                break
            except Exception:
                time.sleep(0.1)
        async with websockets.connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            n = 0
            async def call(method, **params):
                nonlocal n
                n += 1
                await ws.send(json.dumps({"id": n, "method": method, "params": params}))
                while True:
                    msg = json.loads(await ws.recv())
                    if msg.get("id") == n:
                        return msg
            async def js(expr):
                r = await call("Runtime.evaluate", expression=expr, awaitPromise=True, returnByValue=True)
                return r["result"]["result"].get("value")
            await call("Page.enable")
            # Marks the first time the jobs table shows rows (a DOM
            # observer, so it works for any build of the page): the first
            # render with the fleet's jobs, from navigation start.
            await call("Page.addScriptToEvaluateOnNewDocument", source="""
                new MutationObserver((_, obs) => {
                    if (document.querySelector('#jobs tbody tr[data-job]')) {
                        performance.mark('bench-rows-shown'); obs.disconnect();
                    }
                }).observe(document, {childList: true, subtree: true});""")
            await call("Page.navigate", url=URL)
            t0 = time.time()
            while not await js("document.querySelectorAll('#jobs tbody tr[data-job]').length >= 200"):
                if time.time() - t0 > 60: raise SystemExit("no rows")
                await asyncio.sleep(0.2)
            print("loaded in", round(time.time() - t0, 2), "s; first render mark",
                  await js("performance.getEntriesByName('tunefleet-first-render')[0]?.startTime"),
                  "ms; first render with the jobs",
                  await js("performance.getEntriesByName('bench-rows-shown')[0]?.startTime"), "ms")
            timed = """(async () => {
                const el = document.querySelector(%s);
                const t = performance.now(); el.click();
                await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
                return performance.now() - t; })()"""
            for label, css in [("sort by name", "'button.sort[data-sort=Name]'"),
                               ("sort by name again", "'button.sort[data-sort=Name]'"),
                               ("filter: queued", "'button.chip[data-filter=queued]'"),
                               ("filter: all", "'button.chip[data-filter=all]'"),
                               ("theme", "'header button.icon'"),
                               ("open a job", "'#jobs tbody tr[data-job] td.name'"),
                               ("show more", "'button.more'")]:
                times = []
                for _ in range(5):
                    times.append(await js(timed % css))
                print(f"{label}: " + ", ".join(f"{t:.1f}" for t in times) + " ms")
            print("rows shown:", await js("document.querySelectorAll('#jobs tbody tr[data-job]').length"))
    finally:
        chrome.kill()

asyncio.run(main())
