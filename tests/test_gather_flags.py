"""A checked gather's flag written once per work-item (fuseloop.lower.gather_flags): the
error still names an offending value, whichever work-item holds it, and no work-item that
read only valid indices (or none) reports one."""

from __future__ import annotations

import loopy as lp
import numpy as np
import pytest
from loopy.kernel.data import GroupInameTag, LocalInameTag

import fuseloop as fl
from fuseloop.errors import CheckError, IndexOutOfBoundsError

N = 3 * 4096 + 77  # several work-items of the CPU's chunked loop, the last one short


def _flag_stores(expr: fl.Array) -> list[frozenset[str]]:
    """The loops (inames not run by hardware axes) around each store to the flag,
    after the recipe."""
    knl = fl.program(expr).lower().t_unit.default_entrypoint
    hw = (GroupInameTag, LocalInameTag)
    return [frozenset(i for i in insn.within_inames if not knl.iname_tags_of_type(i, hw))
            for insn in knl.instructions
            if isinstance(insn, lp.Assignment) and insn.assignee_var_names() == ("err",)]


def test_flag_stored_outside_the_loops(device):
    x = fl.asarray(np.arange(N, dtype=np.float32))
    idx = fl.asarray(np.arange(N)[::-1].copy())
    stores = _flag_stores(x[idx] * 2)
    assert len(stores) == 3 and all(not loops for loops in stores)
    probe = _flag_stores(fl.check_positive(x + 1, "x"))
    assert len(probe) == 3 and all(not loops for loops in probe)


@pytest.mark.parametrize("at", [0, 4096, N - 1])
@pytest.mark.parametrize("bad", [N, N + 12345, -N - 1, -5 * N])
def test_one_offender_is_named(device, at, bad):
    h = np.arange(N, dtype=np.float32)
    k = np.random.default_rng(at).integers(-N, N, N)
    k[at] = bad
    x, idx = fl.asarray(h), fl.asarray(k)
    with pytest.raises(IndexOutOfBoundsError,
                       match=rf"index {bad} is out of bounds for axis 0 with size {N}"):
        (x[idx] + 1).get()
    with pytest.raises(IndexError):
        h[k]
    k[at] = -N  # the least value in range: no error, numpy's values
    np.testing.assert_array_equal((x[fl.asarray(k)] + 1).get(), h[k] + 1)


def test_offenders_below_and_above(device):
    k = np.zeros(N, np.int64)
    k[10], k[N - 3] = -N - 7, N + 9
    with pytest.raises(IndexOutOfBoundsError, match=rf"index (-{N + 7}|{N + 9}) is out of"):
        fl.asarray(np.ones(N))[fl.asarray(k)].get()


def test_rows_and_reductions(device):
    """A gather of whole rows (the index read once per row) and one inside a reduction."""
    h = np.arange(40 * 300, dtype=np.float64).reshape(40, 300)
    rows = np.random.default_rng(1).integers(-40, 40, 5000)
    x, r = fl.asarray(h), fl.asarray(rows)
    np.testing.assert_array_equal(fl.take(x, r, axis=0).get(), h[rows])
    labels = np.random.default_rng(2).integers(0, 300, 40)
    got = fl.sum(x[fl.arange(40), fl.asarray(labels)] * 2).get()
    np.testing.assert_allclose(got, (h[np.arange(40), labels] * 2).sum())
    rows[4321] = 40
    with pytest.raises(IndexOutOfBoundsError, match="index 40 is out of bounds for axis 0"):
        fl.take(x, fl.asarray(rows), axis=0).get()
    labels[17] = -301
    with pytest.raises(IndexOutOfBoundsError, match="index -301 is out of bounds for axis 1"):
        fl.sum(x[fl.arange(40), fl.asarray(labels)]).get()


def test_concatenated_pieces(device):
    """A gather in one piece of a concatenation: work-items of the other piece read no
    index and report nothing."""
    a = fl.asarray(np.arange(N, dtype=np.float32))
    k = np.arange(5000)[::-1].copy()
    idx = fl.asarray(k)
    got = fl.concatenate([a, a[idx] * 2]).get()
    np.testing.assert_array_equal(got, np.concatenate([np.arange(N), np.arange(N)[k] * 2]))
    k[4999] = N + 1
    with pytest.raises(IndexOutOfBoundsError, match=rf"index {N + 1} is out of bounds"):
        fl.concatenate([a, a[fl.asarray(k)]]).get()


def test_check_names_an_offending_index(device):
    h = np.ones(N)
    h[[5000, 9000]] = -1.0
    with pytest.raises(CheckError) as info:
        (fl.check_positive(fl.asarray(h), "x") * 3).get()
    assert info.value.index in (5000, 9000) and info.value.value == -1.0
