"""Compare GPU recipe shapes for ``2*x - sin(y) + x*y`` through fl.register_recipe.

Usage: python benchmarks/probes/gpu_recipe_variants.py [log2 size]
Prints GB/s and the fraction of the OpenCL buffer-copy bandwidth measured in the same run.
"""

from __future__ import annotations

import sys

import loopy as lp
import numpy as np
import pyopencl as cl

import fuseloop as fl
from fuseloop.bench.runner import median_time


def make_recipe(group, per_item):
    def recipe(t_unit, device):
        t_unit = lp.split_iname(t_unit, "i", group * per_item, outer_tag="g.0")
        if per_item == 1:
            return lp.tag_inames(t_unit, {"i_inner": "l.0"})
        return lp.split_iname(t_unit, "i_inner", group, outer_tag="unr", inner_tag="l.0")
    return recipe


def main() -> None:
    n = 2 ** (int(sys.argv[1]) if len(sys.argv) > 1 else 27)
    dev = fl.get_device()
    rng = np.random.default_rng(0)
    x = fl.asarray(rng.random(n, dtype=np.float32))
    y = fl.asarray(rng.random(n, dtype=np.float32))
    out = fl.empty_like(x)
    copy = median_time(lambda: cl.enqueue_copy(dev.queue, out.data, x.data, byte_count=4 * n),
                       fl.synchronize, 20, warmup=1)
    copy_bw = 8 * n / copy / 1e9
    print(f"{dev.name}: n=2^{n.bit_length() - 1}, OpenCL buffer copy {copy_bw:.0f} GB/s")
    kind = "nvidia" if "nvidia" in dev.vendor.lower() else dev.type
    for group, per in [(128, 4), (128, 8), (256, 4), (64, 8), (256, 8)]:
        fl.register_recipe(kind, make_recipe(group, per), name=f"probe-{group}x{per}")

        def run():
            out[...] = 2 * x - fl.sin(y) + x * y

        bw = 12 * n / median_time(run, fl.synchronize, 20, warmup=1) / 1e9
        print(f"group {group} x {per} per work-item: {bw:.0f} GB/s = {bw / copy_bw:.1%} of copy")


if __name__ == "__main__":
    main()
