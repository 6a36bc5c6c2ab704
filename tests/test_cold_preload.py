"""A cold process's work before its first kernel, overlapped: Loopy is imported on a
thread from device discovery on (fuseloop._lazy.preload_loopy) while the driver starts
and the device's context is made with the GIL released (fuseloop.runtime.icd), and the
compile worker readies the device after this process's context is made."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyopencl as cl
import pytest

from fuseloop.runtime import icd

pytestmark = pytest.mark.opencl_only

# (the packages a first code generation and a first kernel object load)
WATCHED = ("loopy", "islpy", "pymbolic", "pytools", "pyopencl", "colorama")

FIRST = textwrap.dedent("""
    import json, sys
    import numpy as np
    import fuseloop as fl
    from fuseloop import _lazy
    from fuseloop.backends import opencl
    from fuseloop.runtime import compile_workers, icd
    if sys.argv[1] == "gpu":  # (as where a GPU's driver is listed)
        icd.lists_other_runtimes = lambda: True
    readied_at_open = []  # (devices a worker was asked to ready when this one opened)
    opened = opencl.OpenCLBackend.open
    def opening(self, device):
        readied_at_open.append(sum(len(w.warmed) for w in compile_workers._pool.idle))
        return opened(self, device)
    opencl.OpenCLBackend.open = opening
    x = fl.asarray(np.linspace(0, 1, 300, dtype=np.float32))
    y = fl.asarray(np.linspace(1, 2, 300, dtype=np.float32))
    thread = _lazy._preload is not None
    _lazy.await_preload()
    before = set(sys.modules)
    recipes = "fuseloop.recipes" in before
    got = (2 * x - fl.sin(y) + x * y).get()
    xh, yh = x.get(), y.get()
    watched = WATCHED
    print(json.dumps({
        "thread": thread, "ok": bool(np.allclose(got, 2 * xh - np.sin(yh) + xh * yh)),
        "recipes": recipes,
        "imported": sorted(m for m in set(sys.modules) - before
                           if m.partition(".")[0] in watched
                           or m.startswith(("fuseloop.lower", "fuseloop.recipes"))),
        "readied_at_open": readied_at_open,
        "readied": sum(len(w.warmed) for w in compile_workers._pool.idle)}))
""").replace("WATCHED", repr(WATCHED))


def _first(cache_dir: str, listed: str = "gpu") -> dict:
    env = {**os.environ, "FUSELOOP_CACHE_DIR": cache_dir, "FUSELOOP_COMPILE": "process",
           "FUSELOOP_PROGRESS": "0"}
    out = subprocess.run([sys.executable, "-c", FIRST, listed], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_cold_process_imports_loopy_before_its_first_miss(tmp_path):
    if os.environ.get("FUSELOOP_DEVICE", "").lower().startswith("cuda"):
        pytest.skip("the OpenCL backend's device")
    cold = _first(str(tmp_path))
    # Loopy, the modules of its first code generation (Loopy's and fuseloop's) and
    # pyopencl's invoker came on the thread: the first result imported none of them
    assert cold["ok"] and cold["thread"]
    assert cold["imported"] == []
    assert cold["recipes"]  # (fuseloop's recipes and lowering too)
    # this process's context was made before a worker was asked to ready the device
    # (a driver making two at once made each slower); it was asked after
    assert cold["readied_at_open"] == [0] and cold["readied"] == 1
    # a process whose cache saw the device (its kernels on disk) imports nothing early
    warm = _first(str(tmp_path))
    assert warm["ok"] and not warm["thread"] and warm["readied_at_open"] == [0]


def test_a_cpu_runtimes_cold_process_imports_loopy_at_its_first_miss(tmp_path, device):
    # (little GIL-free time to put the import beside; small arrays may never need Loopy)
    if device.type != "cpu" or icd.lists_other_runtimes():
        pytest.skip("a machine whose OpenCL loader lists the CPU runtimes only")
    cold = _first(str(tmp_path), listed="as is")
    assert cold["ok"] and not cold["thread"] and "loopy" in cold["imported"]
    assert not cold["recipes"]


def test_other_runtimes_are_told_from_the_vendor_files(tmp_path, monkeypatch):
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path))
    (tmp_path / "pocl.icd").write_text("/opt/lib/libpocl.so.2\n")
    (tmp_path / "intel-cpu.icd").write_text("libintelocl.so\n")
    assert not icd.lists_other_runtimes()
    (tmp_path / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    assert icd.lists_other_runtimes()
    # one ICD named alone: not told, so taken as possibly a GPU's
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path / "pocl.icd"))
    assert icd.lists_other_runtimes()


def test_contexts_made_without_the_gil_are_the_devices(device):
    loader = icd._opencl_loader()
    if loader is None:
        pytest.skip("no /proc/self/maps: pyopencl's own calls")
    # ctypes releases the GIL for a CDLL's functions (not for a PyDLL's)
    assert not loader._func_flags_ & ctypes._FUNCFLAG_PYTHONAPI
    context = icd.new_context([device.cl_device])
    assert context.devices == [device.cl_device]
    queue = cl.CommandQueue(context)
    program = cl.Program(context, "__kernel void k(__global float *a) "
                                  "{ a[get_global_id(0)] *= 2.0f; }").build()
    host = np.arange(16, dtype=np.float32)
    buf = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    program.k(queue, (16,), None, buf)
    out = np.empty_like(host)
    cl.enqueue_copy(queue, out, buf)
    np.testing.assert_array_equal(out, host * 2)


def test_without_the_loader_contexts_come_from_pyopencl(device, monkeypatch):
    monkeypatch.setattr(icd, "_loader", False)  # (as where /proc cannot be read)
    icd.start_drivers()
    assert icd.new_context([device.cl_device]).devices == [device.cl_device]
