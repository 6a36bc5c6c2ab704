"""Benchmark suite: the same as ``fuseloop bench`` (see docs/benchmarks.md).

Usage::

    python benchmarks/run_suite.py [--device SPEC] [--sizes 2^16,2^20,2^24] [--quick]
                                   [--out DIR]
"""

import sys

from fuseloop.bench import main

if __name__ == "__main__":
    sys.exit(main())
