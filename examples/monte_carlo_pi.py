"""Monte-Carlo pi (VexCL's example): random points in the unit square, counted inside
the quarter circle, with the random numbers made in the counting kernel itself.

Run: python examples/monte_carlo_pi.py
"""

import numpy as np

import fuseloop as fl

n = 10_000_000
g = fl.random.Generator(key=2024)  # Philox4x32-10; each draw takes the next counter
x, y = g.uniform(size=n), g.uniform(size=n)
fl.reset_stats()
pi = 4 * float(fl.sum(x * x + y * y < 1)) / n
print(f"pi ~ {pi:.5f} (error {abs(pi - np.pi):.1e}) from {n} points; "
      f"kernels launched: {fl.stats()['kernels_launched']} (the reduction's stages), "
      "no buffer of random numbers")
assert abs(pi - np.pi) < 5e-3
