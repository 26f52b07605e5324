"""The asyncio API under the sync one, used directly."""

from __future__ import annotations

import asyncio

import pytest

import tunefleet
from conftest import ADMIN_TOKEN, matmul_yaml


def test_the_async_api(master, workers):
    async def main():
        async with await tunefleet.aio.connect(master.url, token=ADMIN_TOKEN) as fleet:
            assert fleet.role == "admin"
            jobs = await fleet.submit(matmul_yaml([48, 56]))
            # Two waits at once on one connection: each gets every event.
            first, second = await asyncio.gather(jobs.wait(timeout=30), jobs.wait(timeout=30))
            assert [j.state for j in first] == [j.state for j in second] == ["done", "done"]
            assert (await fleet.status()).jobs.done == 2
            more = await fleet.submit(matmul_yaml([40]))
            await more.cancel()
            with pytest.raises(tunefleet.RunFailed):
                await more.wait(timeout=10)
            with pytest.raises(tunefleet.TunefleetError) as e:
                await fleet.run("none").wait(timeout=5)
            assert e.value.code == "not_found"

    workers.start(master.url, "sim", 0.2)
    asyncio.run(main())


def test_jobs_retry_and_wait_timeout(master, workers, fleet):
    jobs = fleet.submit(matmul_yaml([24, 28]))
    with pytest.raises(tunefleet.TunefleetError) as e:
        jobs.wait(timeout=0.5)  # no worker yet
    assert e.value.code == "timeout" and "2 job(s) still unfinished" in str(e.value)
    jobs.cancel()
    assert {j.state for j in jobs.results()} == {"cancelled"}
    jobs.retry()
    workers.start(master.url, "sim", 0.1)
    assert {j.state for j in jobs.wait(timeout=30)} == {"done"}
