"""zoomd.AsyncClient: the same calls as coroutines, 32 searches at once."""

import asyncio

import numpy as np
import pytest

import zoomd


@pytest.mark.asyncio
async def test_32_concurrent_searches_match_the_sync_client(server, client, name, sift):
    client.create_collection(name, dim=128, metric="l2", dtype="uint8")
    client.import_points(name, sift["base"], progress=False)
    client.build_index(name)
    queries = sift["query"][:32]
    want = [client.search(name, q, k=10, rerank=50).ids.tolist() for q in queries]
    async with zoomd.AsyncClient(server.target, timeout=120) as a:
        got = await asyncio.gather(*[a.search(name, q, k=10, rerank=50) for q in queries])
        assert [g.ids.tolist() for g in got] == want
        assert all(g.stats.ssd_reads > 0 for g in got)
        batch = await a.search_batch(name, queries[:4], k=10, rerank=50)
        assert [b.ids.tolist() for b in batch] == want[:4]


@pytest.mark.asyncio
async def test_async_round_trips(server, name):
    async with zoomd.AsyncClient(server.target, timeout=120) as a:
        assert await a.health() == "SERVING"
        assert (await a.server_info()).version == zoomd.__version__
        info = await a.create_collection(name, dim=4, metric="l2")
        assert info.dim == 4
        assert name in [c.name for c in await a.list_collections()]
        x = np.random.default_rng(1).random((3000, 4), dtype=np.float32)
        r = await a.import_points(name, x, payloads=[{"i": i} for i in range(3000)],
                                  progress=False, batch_size=700)
        assert r.imported == 3000
        assert await a.upsert(name, [5000], np.ones((1, 4))) == 1
        assert await a.count(name) == 3001
        assert await a.count(name, {"must": [{"key": "i", "range": {"gte": 2990}}]}) == 10
        recs = await a.get(name, [7], with_vectors=True)
        np.testing.assert_array_equal(recs[0].vector, x[7])
        assert await a.set_payload(name, [7], {"t": "x"}) == 1
        assert await a.delete_payload(name, [7], ["i"]) == 1
        assert (await a.get(name, [7]))[0].payload == {"t": "x"}
        page, nxt = await a.scroll(name, limit=10)
        assert [p.id for p in page] == list(range(10)) and nxt == 10
        assert (await a.build_index(name)).index_state == "ready"
        assert (await a.create_field_index(name, "t", "keyword")).field_indexes
        assert await a.delete(name, ids=[7, 8]) == 2
        await a.compact(name)
        with pytest.raises(zoomd.InvalidArgument, match="wrong dimension"):
            await a.search(name, np.ones(5))
        with pytest.raises(zoomd.NotFound):
            await a.get_collection("nope")
        await a.drop_collection(name)
