"""GPU tests with RMM as the frameworks' allocator (rmm.allocators.cupy, rmm.allocators.torch, over an
RMM pool counted by rmm.mr.StatisticsResourceAdaptor): a search's results and temporaries come from
RMM, the device's default memory pool (streamkit's own) stays untouched, the results are the arrays
RMM allocated (no extra copy) and equal those of the default allocators; a scaler's outputs come from
RMM and steady transforms into `out` allocate nothing. Each case runs in a fresh interpreter: PyTorch
takes a pluggable allocator only before its first allocation. Skipped without a GPU or RMM."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import streamkit

pytestmark = pytest.mark.skipif(streamkit.device_count() == 0, reason="no CUDA device visible (streamkit.device_count() == 0)")
pytest.importorskip("rmm", reason="RMM (rmm-cu13) is not installed")

COMMON = """
import json
import numpy as np
import rmm
import streamkit
from streamkit import _streamkit

stats = rmm.mr.StatisticsResourceAdaptor(rmm.mr.PoolMemoryResource(rmm.mr.CudaAsyncMemoryResource(),
                                                                   initial_pool_size=2**28))
rmm.mr.set_current_device_resource(stats)


def counts():
    c = stats.allocation_counts
    get = (lambda k: c[k]) if isinstance(c, dict) else (lambda k: getattr(c, k))
    return {"total": get("total_count"), "current": get("current_count")}


def owner(array):
    # What owns a CuPy array's memory (CuPy 14's UnownedMemory keeps it as _owner).
    memory = array.data.mem
    return type(getattr(memory, "owner", None) or getattr(memory, "_owner", None)).__name__


def points(rng, n):
    return np.stack([rng.uniform(-90, 90, n), rng.uniform(-180, 180, n)], axis=1)
"""

CUPY = COMMON + """
import cupy
from rmm.allocators.cupy import rmm_cupy_allocator

rng = np.random.default_rng(int.from_bytes(__import__("os").urandom(4), "little"))
obs_host, ref_host = points(rng, 200_000), points(rng, 50_000)
out = {}

# Control: CuPy's own pool. The search's temporaries come from streamkit's pool (the device's
# default cudaMallocAsync pool), whose high-water mark shows them.
obs, ref = cupy.asarray(obs_host), cupy.asarray(ref_host)
_streamkit._default_pool_used_high(0, True)
want_i, want_d = streamkit.nearest(obs, ref, 8)
cupy.cuda.Device().synchronize()
out["default_allocator_pool_high"] = _streamkit._default_pool_used_high(0, False)
want_i, want_d = cupy.asnumpy(want_i), cupy.asnumpy(want_d)

cupy.cuda.set_allocator(rmm_cupy_allocator)
obs, ref = cupy.asarray(obs_host), cupy.asarray(ref_host)
cupy.cuda.Device().synchronize()
before = counts()
_streamkit._default_pool_used_high(0, True)
indices, distances = streamkit.nearest(obs, ref, 8)
cupy.cuda.Device().synchronize()
after = counts()
out["nearest"] = {
    "allocations": after["total"] - before["total"],
    "live": after["current"] - before["current"],
    "pool_high": _streamkit._default_pool_used_high(0, False),
    "results_from_rmm": [owner(a) for a in (indices, distances)],
    "same_as_default": bool(np.array_equal(cupy.asnumpy(indices), want_i) and np.array_equal(cupy.asnumpy(distances), want_d)),
}

X = cupy.asarray(rng.standard_normal((4096, 33)))
scaler = streamkit.MinMaxScaler()
scaled = scaler.fit_transform(X)
target = cupy.empty_like(X)
cupy.cuda.Device().synchronize()
before = counts()
for _ in range(5):
    scaler.fit(X)
    scaler.transform(X, out=target)
cupy.cuda.Device().synchronize()
out["minmax"] = {
    "result_from_rmm": owner(scaled),
    "steady_allocations": counts()["total"] - before["total"],
    "close": bool(cupy.allclose(scaled, target)),
}
print(json.dumps(out))
"""

TORCH = COMMON + """
import torch
from rmm.allocators.torch import rmm_torch_allocator

torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
rng = np.random.default_rng(int.from_bytes(__import__("os").urandom(4), "little"))
obs = torch.from_numpy(points(rng, 200_000)).cuda()
ref = torch.from_numpy(points(rng, 50_000)).cuda()
torch.cuda.synchronize()
out = {"backend": torch.cuda.get_allocator_backend()}
before = counts()
_streamkit._default_pool_used_high(0, True)
indices, distances = streamkit.nearest(obs, ref, 8)
torch.cuda.synchronize()
after = counts()
out["nearest"] = {
    "allocations": after["total"] - before["total"],
    "live": after["current"] - before["current"],
    "pool_high": _streamkit._default_pool_used_high(0, False),
}
# The same search on the host (NumPy: streamkit's dispatcher, streamkit's own memory) as the reference.
want_i, want_d = streamkit.nearest(obs.cpu().numpy(), ref.cpu().numpy(), 8)
out["nearest"]["same_as_host"] = bool(np.array_equal(indices.cpu().numpy(), want_i) and np.array_equal(distances.cpu().numpy(), want_d))
X = torch.from_numpy(rng.standard_normal((4096, 33))).cuda()
scaler = streamkit.MinMaxScaler().fit(X)
target = torch.empty_like(X)
torch.cuda.synchronize()
before = counts()
scaled = scaler.transform(X)
torch.cuda.synchronize()
middle = counts()
for _ in range(5):
    scaler.fit(X)
    scaler.transform(X, out=target)
torch.cuda.synchronize()
out["minmax"] = {"result_allocations": middle["total"] - before["total"], "steady_allocations": counts()["total"] - middle["total"],
                 "close": bool(torch.allclose(scaled, target))}
print(json.dumps(out))
"""


def run(script):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cupy_with_rmm_takes_results_and_temporaries_from_rmm():
    pytest.importorskip("cupy", reason="CuPy is not installed")
    pytest.importorskip("rmm.allocators.cupy", reason="rmm.allocators.cupy is not available")
    found = run(CUPY)
    print(found)
    assert found["default_allocator_pool_high"] > 0, "control: with CuPy's own pool the temporaries are streamkit's"
    nearest = found["nearest"]
    assert nearest["pool_high"] == 0, "a temporary came from streamkit's pool instead of RMM"
    assert nearest["allocations"] >= 3, "the two results and at least one temporary from RMM"
    assert nearest["live"] == 2, "only the two results stay allocated"
    assert nearest["results_from_rmm"] == ["DeviceBuffer", "DeviceBuffer"], "the results are RMM's buffers, not copies"
    assert nearest["same_as_default"]
    assert found["minmax"]["result_from_rmm"] == "DeviceBuffer"
    assert found["minmax"]["steady_allocations"] == 0
    assert found["minmax"]["close"]


def test_torch_with_rmm_takes_results_and_temporaries_from_rmm():
    pytest.importorskip("torch", reason="PyTorch is not installed")
    pytest.importorskip("rmm.allocators.torch", reason="rmm.allocators.torch is not available")
    found = run(TORCH)
    print(found)
    assert found["backend"] == "pluggable"
    nearest = found["nearest"]
    assert nearest["pool_high"] == 0, "a temporary came from streamkit's pool instead of RMM"
    assert nearest["allocations"] >= 3, "the two results and at least one temporary from RMM"
    assert nearest["live"] == 2, "only the two results stay allocated"
    assert nearest["same_as_host"]
    assert found["minmax"]["result_allocations"] == 1, "the transform's result, from RMM"
    assert found["minmax"]["steady_allocations"] == 0
    assert found["minmax"]["close"]
