"""The micro-batcher waits for more rows only while another request is on its way: a lone
request is scored at once whatever ``max_wait``, and requests read together share a call."""

from __future__ import annotations

import asyncio

from pipeline.serve.batcher import Job, MicroBatcher


class Recorder:
    """A model that scores each row as its value doubled and records each call's batch."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def score_columns(self, parts):
        self.calls.append([len(part["x"]) for part in parts])
        return [{"y": [2 * v for v in part["x"]]} for part in parts], None


def job(model: Recorder, *values: int) -> Job:
    return Job(model=model, rows=len(values), columns={"x": list(values)})


def test_a_lone_request_is_scored_without_waiting_for_max_wait():
    async def main() -> list[list[int]]:
        model = Recorder()
        batcher = MicroBatcher(max_rows=64, max_wait=600.0)     # ten minutes: waiting would time out
        await batcher.start()
        try:
            first = await asyncio.wait_for(batcher.submit(job(model, 1)), timeout=30)
            second = await asyncio.wait_for(batcher.submit(job(model, 2, 3)), timeout=30)
        finally:
            await batcher.stop()
        assert first == {"y": [2]} and second == {"y": [4, 6]}
        return model.calls

    assert asyncio.run(main()) == [[1], [2]]


def test_requests_being_read_are_waited_for_and_share_one_model_call():
    async def main() -> list[list[int]]:
        model = Recorder()
        batcher = MicroBatcher(max_rows=64, max_wait=600.0)
        await batcher.start()
        try:
            with batcher.arriving():                              # a second request is being read
                first = batcher.enqueue(job(model, 1))
                await asyncio.sleep(0.05)
                assert not first.done() and model.calls == []       # held for the one on its way
                second = batcher.enqueue(job(model, 5))             # read: queued before the wait ends
            results = await asyncio.wait_for(asyncio.gather(first, second), timeout=30)
        finally:
            await batcher.stop()
        assert results == [{"y": [2]}, {"y": [10]}]
        return model.calls

    assert asyncio.run(main()) == [[1, 1]]
