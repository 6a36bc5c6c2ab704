"""NPBench's loop kernels' statement shapes (issue 26): results equal numpy's on every
path a statement may take, its replays included."""

from __future__ import annotations

import numpy as np

import fuseloop as fl


def test_an_empty_statement_in_a_loop_replays_on_the_device_path(device_path):
    # symm's first row: ``C[:i, j] += ...`` with i == 0 writes nothing; its replayed
    # plan has no launches (plan_ready.Ready.run took the first of none)
    rng = np.random.default_rng(0)
    hc, ha, hb = (rng.random((5, 4)) for _ in range(3))
    c, a, b = fl.asarray(hc), fl.asarray(ha), fl.asarray(hb)
    for _ in range(3):  # (a plan is made ready at its second replay)
        for i in range(3):
            for j in range(4):
                c[:i, j] += 1.5 * b[i, j] * a[i, :i]
                hc[:i, j] += 1.5 * hb[i, j] * ha[i, :i]
    np.testing.assert_allclose(c.get(), hc, rtol=1e-12)
