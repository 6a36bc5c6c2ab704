"""What fuseloop sets up in Loopy for its code generation: one class per definition in
Loopy's loop-nest generator and kernels copied by Loopy's renames only where a rename
touches them (fuseloop.lower.loopy_classes), and one Loopy target object per equal
target (fuseloop.lower.codegen)."""

from __future__ import annotations

import dataclasses

import loopy as lp
import numpy as np

import fuseloop as fl
from fuseloop.lower import loopy_classes


def _unrolled_kernel() -> lp.TranslationUnit:
    """A loop unrolled by Loopy: its generator builds a loop nest per copy."""
    knl = lp.make_kernel("{ [i, k] : 0 <= i < n and 0 <= k < 4 }",
                         "out[4*i + k] = 2 * a[4*i + k]",
                         [lp.GlobalArg("a", np.float32, shape=None),
                          lp.GlobalArg("out", np.float32, shape=None, is_output=True),
                          lp.ValueArg("n", np.int32)],
                         target=lp.OpenCLTarget(), lang_version=(2018, 2))
    return lp.tag_inames(knl, {"k": "unr"})


def _source() -> str:
    with lp.CacheMode(False):  # (a cached result would not run the generator)
        return lp.generate_code_v2(_unrolled_kernel()).device_code()


def _record_classes() -> list:
    return [c for k, c in loopy_classes._made.items() if k[1].endswith("ScheduleIndexInfo")]


def test_loop_nest_records_made_once_and_the_source_unchanged(monkeypatch):
    from loopy.codegen import control

    monkeypatch.setattr(control, "dataclass", dataclasses.dataclass)
    plain = _source()
    assert loopy_classes.install()
    assert control.dataclass is loopy_classes._once_per_definition
    assert _source() == plain
    made = _record_classes()
    assert len(made) == 1
    _source()  # (four unrolled copies and the loops around them: no class made again)
    assert _record_classes() == made


def test_other_loopy_releases_left_alone(monkeypatch):
    from loopy.codegen import control

    monkeypatch.setattr(control, "dataclass", dataclasses.dataclass)
    monkeypatch.setattr(lp, "VERSION", (2099, 1))
    assert not loopy_classes.install()
    assert control.dataclass is dataclasses.dataclass


def _calling_kernel() -> lp.TranslationUnit:
    """A kernel calling a function (``sin``), resolved by type inference."""
    knl = lp.make_kernel("{ [i] : 0 <= i < n }", "out[i] = sin(a[i])",
                         [lp.GlobalArg("a", np.float32, shape=None),
                          lp.GlobalArg("out", np.float32, shape=None, is_output=True),
                          lp.ValueArg("n", np.int32)],
                         target=lp.OpenCLTarget(), lang_version=(2018, 2))
    return lp.infer_unknown_types(knl)


def test_renames_copy_only_kernels_they_touch(monkeypatch):
    from loopy import translation_unit
    from loopy.codegen import control

    loopy_rename = translation_unit.rename_resolved_functions_in_a_single_kernel
    if loopy_rename is loopy_classes._rename_where_called:
        loopy_rename = loopy_classes._loopy_rename[0]
    monkeypatch.setattr(translation_unit, "rename_resolved_functions_in_a_single_kernel",
                        loopy_rename)
    monkeypatch.setattr(control, "dataclass", dataclasses.dataclass)
    with lp.CacheMode(False):
        plain = lp.generate_code_v2(_calling_kernel()).device_code()
    assert loopy_classes.install()
    rename = translation_unit.rename_resolved_functions_in_a_single_kernel
    assert rename is loopy_classes._rename_where_called
    with lp.CacheMode(False):
        assert lp.generate_code_v2(_calling_kernel()).device_code() == plain
    knl = _calling_kernel().default_entrypoint
    (called,) = {i.expression.function.name for i in knl.instructions}
    assert rename(knl, {}) is knl
    assert rename(knl, {"other_kernel": "kernel"}) is knl
    renamed = rename(knl, {called: "fl_renamed"})  # (a rename it touches: Loopy's own)
    assert renamed is not knl
    assert {i.expression.function.name for i in renamed.instructions} == {"fl_renamed"}


def test_kernels_share_one_loopy_target():
    x = fl.asarray(np.arange(10, dtype=np.float32))
    first, second = fl.program(x + 1).lower(), fl.program(x * 2 - 1).lower()
    assert first.t_unit.target is second.t_unit.target
