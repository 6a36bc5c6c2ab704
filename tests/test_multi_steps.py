"""Split stencil steps replayed from kept step plans (issue 29, ``fuseloop.multi.steps``)
over two and four PoCL CPU devices, a context each (halo rows through the host), in a
child process (the device list is made once per process): every step's result equals
one device's, bit for bit; once a step was made from kept templates, later steps
replay its plan and copy the same halo rows; the same with the halo uploads left to
the devices' deferred work."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent('''
    import sys
    import numpy as np
    import fuseloop as fl
    from fuseloop.multi import EXCHANGED, steps

    n = int(sys.argv[1])
    pocl = [d for d in fl.devices() if "Portable" in d.platform and d.type == "cpu"]
    if len(pocl) < n:
        print(f"SKIP: PoCL did not list {n} CPU devices")
        raise SystemExit(0)
    devs = pocl[:n]
    assert devs[0].context is not devs[1].context
    rng = np.random.default_rng(12)
    weights = [np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32),
               rng.standard_normal((5, 3)).astype(np.float32)]
    for w in weights:
        for boundary in ("clamp", "wrap", "constant"):
            un = rng.standard_normal((45, 21)).astype(np.float32)
            with fl.device(devs):
                u = fl.asarray(un)
            one = fl.asarray(un, device=devs[0])
            hits, copies = [], []
            for _ in range(5):
                before = EXCHANGED["copies"]
                u = (u + np.float32(0.1) * fl.stencil(u, w, boundary=boundary,
                                                      cval=0.5)).eval()
                one = (one + np.float32(0.1) * fl.stencil(one, w, boundary=boundary,
                                                          cval=0.5)).eval()
                hits.append(steps.LAST_STEP_PLAN[0])
                copies.append(EXCHANGED["copies"] - before)
                np.testing.assert_array_equal(u.get(), one.get())
            assert hits == [0, 0, 0, 1, 1], (w.shape, boundary, hits)
            assert len(set(copies)) == 1, (w.shape, boundary, copies)
    print("ok")
''')


@pytest.mark.parametrize("deferred", ["0", "1"])
@pytest.mark.parametrize("count", [2, 4])
def test_split_stencil_steps_replay_their_plans_on_pocl_devices(count, deferred):
    """(``deferred``: the halo uploads left to the devices' deferred work)"""
    env = dict(os.environ, POCL_DEVICES=" ".join(["pthread"] * count),
               FUSELOOP_HOST_PATH="0", FUSELOOP_OPENCL_SHARED_CONTEXT="0",
               FUSELOOP_MULTI_DEFERRED_UPLOADS=deferred)
    env.pop("FUSELOOP_DEVICE", None)  # (it might name a device that is not listed now)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _CHILD, str(count)], env=env,
                         capture_output=True, text=True, timeout=600)
    if run.stdout.startswith("SKIP"):
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
