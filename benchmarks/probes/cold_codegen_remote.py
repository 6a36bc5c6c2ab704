"""Could a kernel's code generation run in a second process that imported Loopy early?

Issue 26's idea: a worker process started when a device is first opened imports Loopy
beside the caller's device discovery, and a cache miss sends it the lowering's input.
Two new processes start together, with empty caches: the *caller* makes two arrays and
evaluates ``case`` (its cache miss records when it came and pickles what the worker
would need: the program, the index dtype, the device's number, the recipe's kind and
cache id, the size class), then generates the plan itself; the *worker*
imports numpy, fuseloop and Loopy, discovers the devices (recipes read the driver's
device object: vector widths, local memory), and, given the caller's request, picks
the recipe as the caller did (``recipe_for``: the same cache id?), generates the plan and compares
it with the caller's.  Printed: when each was ready (seconds since its start, wall and
CPU), the request's size, the worker's code generation time, and whether the plans match.
Timings are printed, never asserted.

Usage::

    python benchmarks/probes/cold_codegen_remote.py [--root DIR] [sin | rep50 | sum]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CALLER = """
import json, os, pickle, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import numpy as np
import fuseloop as fl
from fuseloop.lower import codegen
case, out = sys.argv[1], sys.argv[2]
seen = {}
inline = codegen.kernel_plan
def spy(program, index_dtype, device, recipe, user_functions, sizes=""):
    if "miss_wall" not in seen:
        seen["miss_wall"], seen["miss_cpu"] = time.perf_counter() - t0, time.process_time() - c0
        request = (program, index_dtype.str, device.index, recipe.cache_id, recipe.kind,
                   sizes)
        body = pickle.dumps(request)
        seen["request_bytes"], seen["user_functions"] = len(body), len(user_functions)
        with open(out + ".tmp", "wb") as f:
            f.write(body)
        os.replace(out + ".tmp", out)
    plan = inline(program, index_dtype, device, recipe, user_functions, sizes)
    if "plan" not in seen:
        seen["plan"] = plan.to_json()
        seen["inline_done_wall"] = time.perf_counter() - t0
    return plan
codegen.kernel_plan = spy
x = fl.asarray(np.linspace(0, 1, 1 << 16, dtype=np.float32))
y = fl.asarray(np.linspace(1, 2, 1 << 16, dtype=np.float32))
seen["arrays_wall"] = time.perf_counter() - t0
if case == "sin":
    e = 2 * x - fl.sin(y) + x * y
elif case == "sum":
    e = fl.sum(x * y)
else:
    e = x
    for _ in range(int(case[3:])):
        e = fl.sin(e) * 0.5 + e * y
e.get()
seen["result_wall"] = time.perf_counter() - t0
print(json.dumps(seen))
"""

_WORKER = """
import json, os, pickle, sys, time
t0, c0 = time.perf_counter(), time.process_time()
def now():
    return round(time.perf_counter() - t0, 3), round(time.process_time() - c0, 3)
marks = {}
import numpy as np
import fuseloop as fl
from fuseloop.lower import codegen
from fuseloop.recipes import registry
marks["fuseloop"] = now()
import loopy
marks["loopy"] = now()
devices = fl.devices()
marks["devices"] = now()
path = sys.argv[1]
while not os.path.exists(path):  # (the caller writes it at its miss)
    time.sleep(0.005)
marks["request_seen"] = now()
program, dtype, index, cache_id, kind, sizes = pickle.loads(open(path, "rb").read())
recipe = registry.recipe_for(devices[index], kind)  # (the registry's choice, as the caller's)
marks["same_recipe"] = recipe.cache_id == cache_id
start = time.process_time()
plan = codegen.kernel_plan(program, np.dtype(dtype), devices[index], recipe, {}, sizes)
marks["codegen_cpu"] = round(time.process_time() - start, 3)
marks["plan"] = plan.to_json()
print(json.dumps(marks))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT))
    parser.add_argument("case", nargs="?", default="sin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUSELOOP_PROGRESS="0", XDG_CACHE_HOME=f"{tmp}/xdg",
                   POCL_CACHE_DIR=f"{tmp}/pocl", CUDA_CACHE_PATH=f"{tmp}/cuda",
                   PYTHONPATH=os.pathsep.join(p for p in (args.root,
                                                          os.environ.get("PYTHONPATH")) if p))
        request = f"{tmp}/request.pickle"
        started = time.perf_counter()
        worker = subprocess.Popen([sys.executable, "-c", _WORKER, request], cwd=tmp,
                                  text=True, stdout=subprocess.PIPE,
                                  env=dict(env, FUSELOOP_CACHE_DIR=f"{tmp}/w"))
        caller = subprocess.run([sys.executable, "-c", _CALLER, args.case, request], cwd=tmp,
                                text=True, capture_output=True, check=True,
                                env=dict(env, FUSELOOP_CACHE_DIR=f"{tmp}/c"))
        got = json.loads(caller.stdout.strip().splitlines()[-1])
        out, _ = worker.communicate(timeout=600)
        marks = json.loads(out.strip().splitlines()[-1])
        print(f"{args.case}: both started together ({time.perf_counter() - started:.2f} s in all)")
        print(f"  caller: arrays made at {got['arrays_wall']:.2f} s, cache miss at "
              f"{got['miss_wall']:.2f} s, its own plan at {got['inline_done_wall']:.2f} s "
              f"(Loopy imported there), result at {got['result_wall']:.2f} s; request "
              f"{got['request_bytes']} bytes, user functions {got['user_functions']}")
        print(f"  worker (wall s, CPU s since its start): fuseloop {marks['fuseloop']}, Loopy "
              f"{marks['loopy']}, devices {marks['devices']}, request seen "
              f"{marks['request_seen']}; its code generation {marks['codegen_cpu']} CPU s")
        differ = sorted(k for k in {*marks["plan"], *got["plan"]}
                        if marks["plan"].get(k) != got["plan"].get(k))
        print(f"  the registry's choice here is the caller's recipe: {marks['same_recipe']}")
        print(f"  plans equal: {not differ}" + (f" (they differ in {differ})" if differ else ""))
        for k in differ:
            print(f"    {k}: caller {str(got['plan'].get(k))[:300]!r}\n"
                  f"    {k}: worker {str(marks['plan'].get(k))[:300]!r}")


if __name__ == "__main__":
    main()
