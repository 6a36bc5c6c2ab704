"""List OpenCL devices and choose one.

Run: python examples/devices.py
"""

import numpy as np

import fuseloop as fl

devs = fl.devices()
print(f"{len(devs)} OpenCL device(s):")
for d in devs:
    mem_gib = d.global_mem_size / 2**30
    print(f"  [{d.index}] {d.name!r}  type={d.type}  platform={d.platform!r}  "
          f"memory={mem_gib:.1f} GiB  fp64={d.has_fp64}")
    if not d.usable:  # its compiler rejects every kernel; selection prefers other devices
        print(f"      cannot build kernels: {d.problem}")
assert devs, "no OpenCL device found"

print(f"default device: {fl.get_device().name}")

# Filters: by type, by name substring, by double-precision support.
cpus = fl.devices(type="cpu")
print(f"CPU devices: {[d.name for d in cpus]}")
print(f"devices with fp64: {[d.name for d in fl.devices(fp64=True)]}")

if cpus:
    # A context manager selects a device for the arrays created inside it.
    with fl.device("cpu"):
        x = fl.arange(1000, dtype=np.float32)
        y = fl.asarray(np.ones(1000, dtype=np.float32))
        r = (x * y + 1).eval()
        print(f"inside 'with fl.device(\"cpu\")': get_device() = {fl.get_device().name}")
        assert fl.get_device().type == "cpu"
        assert r.device.type == "cpu"
    np.testing.assert_allclose(r.get(), np.arange(1000, dtype=np.float32) + 1)
    print(f"after the block: get_device() = {fl.get_device().name}")

# Selecting by index and by name substring; both name the same device here.
first = devs[0]
with fl.device(first.index):
    assert fl.get_device().name == first.name
with fl.device(first.name):
    assert fl.get_device().name == first.name

# Naming a device that does not exist raises DeviceNotFoundError, which lists the devices.
try:
    with fl.device("no-such-device-xyz"):
        pass
except fl.errors.DeviceNotFoundError as e:
    print(f"DeviceNotFoundError as expected: {str(e).splitlines()[0]}")
else:
    raise AssertionError("expected DeviceNotFoundError")

print("devices: all checks passed")
