"""``FUSELOOP_GATHER_WAIT=defer``: a gather's range flag read at the next read back,
``fl.synchronize()`` or write of a user's array, not at the end of each evaluation
(see ``fuseloop.flags``; on by default nowhere, on a CPU device only with DEFER_ON_CPU)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.bench.broad import cross_entropy

RNG = np.random.default_rng(25)
H = RNG.uniform(-4, 4, (40, 300)).astype(np.float32)
LABELS = RNG.integers(0, 300, 40)
BAD = LABELS.copy()
BAD[3] = 300
MESSAGE = "index 300 is out of bounds for axis 1 with size 300"


def _want(labels: np.ndarray) -> float:
    h = H.astype(np.float64)
    m = h.max(axis=1)
    return float((m + np.log(np.exp(h - m[:, None]).sum(axis=1)) - h[np.arange(40), labels]).mean())


@pytest.fixture
def flag_reads(monkeypatch):
    """Flag reads counted; kernels on the CPU device too (no numpy path for small work)."""
    from fuseloop import flags, host_path

    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    reads: list[int] = []
    check = flags.check

    def counted(buf, dev):
        reads.append(1)
        check(buf, dev)

    monkeypatch.setattr(flags, "check", counted)
    return reads


def _defer(monkeypatch) -> None:
    from fuseloop import flags

    monkeypatch.setenv("FUSELOOP_GATHER_WAIT", "defer")
    monkeypatch.setattr(flags, "DEFER_ON_CPU", True)


def _ce(labels: np.ndarray) -> fl.Array:
    return cross_entropy(fl, fl.asarray(H), fl.asarray(np.arange(40)), fl.asarray(labels))


def test_calls_read_no_flag_until_a_read_back(device, flag_reads, monkeypatch):
    fl.reset_stats()
    float(_ce(LABELS).eval())  # (launches per call as without deferral; one flag read)
    launches = fl.stats()["kernels_launched"]
    assert launches and flag_reads == [1]
    _defer(monkeypatch)
    f = fl.fuse(lambda x, rows, labels: cross_entropy(fl, x, rows, labels))
    x, rows = fl.asarray(H), fl.asarray(np.arange(40))
    for run in (lambda: _ce(LABELS).eval(), lambda: f(x, rows, fl.asarray(LABELS))):
        for _ in range(3):
            fl.reset_stats()
            flag_reads.clear()
            out = run()
            assert fl.stats()["kernels_launched"] == launches and flag_reads == []
            np.testing.assert_allclose(float(out), _want(LABELS), rtol=1e-5)
            assert flag_reads == [1]  # (the one flag the call's kernels wrote, read once)
    fl.reset_stats()
    for _ in range(3):  # (calls without a read between them share one flag)
        out = _ce(LABELS).eval()
    assert fl.stats()["kernels_launched"] == 3 * launches
    flag_reads.clear()
    fl.synchronize()
    assert flag_reads == [1]


def test_out_of_range_raises_at_the_next_read(device, flag_reads, monkeypatch):
    _defer(monkeypatch)
    loss = _ce(BAD).eval()  # (no wait, no error yet)
    assert flag_reads == []
    with pytest.raises(IndexError, match=MESSAGE):
        float(loss)
    np.testing.assert_allclose(float(_ce(LABELS)), _want(LABELS), rtol=1e-5)  # (reported once)
    _ce(BAD).eval()
    with pytest.raises(IndexError, match=MESSAGE):  # (any read back: never lost)
        fl.asarray(np.ones(3)).get()
    _ce(BAD).eval()
    with pytest.raises(IndexError, match=MESSAGE):
        fl.synchronize()
    fl.synchronize()


def test_out_of_range_raises_before_a_user_array_is_written(device, flag_reads, monkeypatch):
    _defer(monkeypatch)
    x = fl.asarray(H)
    picked = x[fl.asarray(np.arange(40)), fl.asarray(BAD)].eval()
    out = fl.zeros(40, dtype=np.float32).eval()
    with pytest.raises(IndexError, match=MESSAGE):
        out[...] = picked * 2
    np.testing.assert_array_equal(out.get(), np.zeros(40, np.float32))
    picked = x[fl.asarray(np.arange(40)), fl.asarray(BAD)].eval()
    with pytest.raises(IndexError, match=MESSAGE):
        out += picked
    np.testing.assert_array_equal(out.get(), np.zeros(40, np.float32))
    picked = x[fl.asarray(np.arange(40)), fl.asarray(BAD)].eval()
    with pytest.raises(IndexError, match=MESSAGE):
        fl.multiply(picked, 2, out=out)
    np.testing.assert_array_equal(out.get(), np.zeros(40, np.float32))


def test_cpu_devices_read_at_the_end_unless_asked(device, flag_reads, monkeypatch):
    monkeypatch.setenv("FUSELOOP_GATHER_WAIT", "defer")
    if device.type != "cpu":
        pytest.skip("a CPU device's evaluation reads its flag at its end")
    with pytest.raises(IndexError, match=MESSAGE):
        _ce(BAD).eval()


def test_an_error_never_read_is_printed_at_exit(device, flag_reads, monkeypatch, capsys):
    from fuseloop import flags

    _defer(monkeypatch)
    _ce(BAD).eval()
    flags.report_at_exit()  # (what atexit calls: it cannot raise)
    assert MESSAGE in capsys.readouterr().err
    flags.report_at_exit()
    assert capsys.readouterr().err == ""
