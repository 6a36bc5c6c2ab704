"""Diagnose tests/test_core.py::test_same_array_loaded_once... per GPU recipe.

Usage: python benchmarks/probes/gpu_load_once_diag.py

For gpu-coalesced version 1 and the shipped recipe: the load, store and call counts of
``log(x) * (log(x) + x)`` and its worst relative error against numpy (the expression
cancels near x = 0.567, so a 1-ULP difference in ``log`` exceeds the test's rtol there).
"""

import loopy as lp
import numpy as np

import fuseloop as fl

dev = fl.get_device()
kind = "nvidia" if "nvidia" in dev.vendor.lower() else dev.type


def old_recipe(t_unit, device):  # gpu-coalesced version 1 (before this change)
    t_unit = lp.split_iname(t_unit, "i", 512, outer_tag="g.0")
    return lp.split_iname(t_unit, "i_inner", 128, outer_tag="unr", inner_tag="l.0")


xh = np.random.default_rng(0).random(1000).astype(np.float32)
x = fl.asarray(xh)
want = np.log(xh) * (np.log(xh) + xh)
for name, rec in [("old v1", old_recipe), ("shipped", fl.recipe_for(dev).transform)]:
    fl.register_recipe(kind, rec, name=f"diag {name}", version="0")
    code = fl.show_code(fl.log(x) * (fl.log(x) + x))
    stores = code.count("out0[")
    got = (fl.log(x) * (fl.log(x) + x)).get()
    rel = np.abs(got - want) / np.abs(want)
    i = int(np.argmax(rel))
    lg = fl.log(x).get()
    print(f"{name}: stores {stores} loads {code.count('in0[')} log calls "
          f"{code.count('fl_log_f32(')} | max rel err {rel[i]:.3g} at x={xh[i]!r} "
          f"(device log {lg[i]!r}, numpy log {np.log(xh[i])!r}) "
          f"| rtol 1e-5 ok: {bool(np.allclose(got, want, rtol=1e-5, atol=0))}")
