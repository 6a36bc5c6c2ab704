"""fuseloop's own kernel transformations (``fuseloop.recipes.transforms``), alone.

No device: each test builds a small Loopy kernel, applies one transformation and
reads the generated OpenCL C.
"""

from __future__ import annotations

import warnings

import loopy as lp
import numpy as np
import pytest
from loopy.diagnostic import WriteRaceConditionWarning

from fuseloop.recipes import transforms

GROUP, LANES = 64, 8


def _row_sums(group: int = GROUP) -> lp.TranslationUnit:
    """``out[i] = sum(a[i, j], j < p)`` and ``twice[i] = 2 * out[i]``, one work-group
    a row, the row's elements strided over ``group`` work-items."""
    knl = lp.make_kernel(
        "{ [i, j] : 0 <= i < n and 0 <= j < p }",
        """
        <float32> s = sum(j, a[i, j])  {id=calc_s}
        out[i] = s  {id=store_s}
        <float32> m = max(j, a[i, j])  {id=calc_m}
        twice[i] = 2 * s + m  {id=store_twice}
        """,
        [lp.GlobalArg("a", np.float32, shape=("n", "p")),
         lp.GlobalArg("out", np.float32, shape=("n",)),
         lp.GlobalArg("twice", np.float32, shape=("n",)), ...],
        target=lp.OpenCLTarget(), lang_version=(2018, 2))
    knl = lp.tag_inames(knl, {"i": "g.0"})
    knl = lp.split_iname(knl, "j", group, inner_tag="l.0")
    return lp.split_reduction_outward(knl, "j_inner")


def _code(t_unit: lp.TranslationUnit) -> str:
    return lp.generate_code_v2(t_unit).device_code()


def test_combine_in_group_two_barriers_for_matched_reductions_only():
    t_unit, done = transforms.combine_in_group(_row_sums(), {"j_inner": "p"}, GROUP, LANES,
                                               within="id:calc_s")
    assert done == {"s"}
    t_unit = transforms.on_every_work_item(t_unit, "w", GROUP, "l.0", {"j_inner"})
    t_unit = lp.set_temporary_address_space(t_unit, "m", "local")
    t_unit = transforms.publish(t_unit, ["m"])
    t_unit = transforms.allow_single_writer(t_unit, ["calc_m", "store_*"])
    with warnings.catch_warnings():  # the first work-item alone stores: not a race
        warnings.simplefilter("error", WriteRaceConditionWarning)
        src = _code(t_unit)
    # the matched sum: partials, LANES combiners, then every work-item combines
    assert f"__local float part_s[{GROUP}];" in src
    assert f"__local float lanes_s[{LANES}];" in src
    partial, lanes, result = (src.index("part_s[lid(0)] ="), src.index("lanes_s[lid(0)] ="),
                              src.index("s = acc_j_m"))
    assert partial < lanes < result
    # both combining loops are left to the device compiler to unroll (Loopy writes one
    # loop each, not one statement per step)
    assert src.count("opencl_unroll_hint") == 2, src
    assert "barrier(CLK_LOCAL_MEM_FENCE)" in src[partial:lanes]
    assert "barrier(CLK_LOCAL_MEM_FENCE)" in src[lanes:result]
    # partials past the row's end read as the neutral value (p is not known >= GROUP)
    assert "< p) ? part_s[" in src
    # the max was not matched: Loopy's tree (no part_/lanes_ arrays of its own)
    assert "part_m" not in src and "lanes_m" not in src
    # every work-item computes the row's values; the first one stores them
    store = src.index("out[gid(0)] = s;")
    assert "if (lid(0) == 0)" in src[result:store]


def test_combine_in_group_leaves_unlisted_inames_and_bad_lanes_alone():
    base = _row_sums()
    same, done = transforms.combine_in_group(base, {"k_inner": "p"}, GROUP, LANES)
    assert done == set() and same is base
    same, done = transforms.combine_in_group(base, {"j_inner": "p"}, GROUP, 48)
    assert done == set() and same is base  # 48 lanes do not divide 64 work-items


@pytest.mark.parametrize("within", [None, "writes:s or writes:m"])
def test_combine_in_group_every_match(within):
    _, done = transforms.combine_in_group(_row_sums(), {"j_inner": "p"}, GROUP, LANES,
                                          within=within)
    assert done == {"s", "m"}
