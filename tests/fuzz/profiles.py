"""The fuzzer's profiles (``HYPOTHESIS_PROFILE``): ``quick`` (the default, for CI) and
``long`` (``nox -s fuzz``), and the sizes of the programs each generates."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
            HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("quick", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("long", max_examples=4000, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "quick")
if PROFILE not in ("quick", "long"):
    raise RuntimeError(f"HYPOTHESIS_PROFILE={PROFILE!r}: tests/test_fuzz.py knows 'quick' "
                       "and 'long'")
FUZZ_SETTINGS = settings.get_profile(PROFILE)
if os.environ.get("FUZZ_EXAMPLES"):  # e.g. to share a long run among processes
    FUZZ_SETTINGS = settings(FUZZ_SETTINGS, max_examples=int(os.environ["FUZZ_EXAMPLES"]))


def few(divisor: int) -> settings:
    """A share of the programs; three in the quick profile (each compiles kernels)."""
    n = 3 if PROFILE == "quick" and not os.environ.get("FUZZ_EXAMPLES") else \
        max(FUZZ_SETTINGS.max_examples // divisor, 1)
    return settings(FUZZ_SETTINGS, max_examples=n)


# the programs starting with a product written in place: four in the quick profile
PRODUCT_SETTINGS = settings(FUZZ_SETTINGS, max_examples=4 if PROFILE == "quick" and not
                            os.environ.get("FUZZ_EXAMPLES") else
                            max(FUZZ_SETTINGS.max_examples // 8, 1))


@dataclass(frozen=True)
class Config:
    """Size of the structure space (every distinct structure compiles a kernel)."""

    max_inputs: int
    max_ndim: int
    dims: tuple[int, ...]
    min_steps: int
    max_steps: int
    big_arrays: bool  # occasionally a 1-D input long enough for two-stage reductions


CONFIG = {
    "quick": Config(max_inputs=2, max_ndim=2, dims=(1, 2, 3), min_steps=2, max_steps=5,
                    big_arrays=False),
    "long": Config(max_inputs=3, max_ndim=3, dims=(1, 2, 3, 4, 5, 7, 0), min_steps=1,
                   max_steps=9, big_arrays=True),
}[PROFILE]



@dataclass(frozen=True)
class ContractSizes:
    """Sizes of the generated in-place products: multiples of no block of the recipes
    (CPU 6 x 16, GPU 128 x 128 and 64 x 64), the rows and columns of the quick
    profile all big enough for a contraction kernel (32)."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]
    reduced: tuple[int, ...]
    batches: tuple[tuple[int, ...], ...]


CONTRACT_SIZES = {
    "quick": ContractSizes(rows=(33, 37, 40, 47), cols=(33, 36, 51), reduced=(5, 17, 40),
                           batches=((), (), (2,))),
    "long": ContractSizes(rows=(1, 2, 5, 17, 33, 35, 37, 40, 47, 65, 101, 133),
                          cols=(1, 3, 7, 33, 36, 41, 51, 100, 131),
                          reduced=(1, 3, 4, 5, 17, 40, 67),
                          batches=((), (), (), (2,), (3,), (2, 1))),
}[PROFILE]

