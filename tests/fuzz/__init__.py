"""The differential fuzzer behind ``tests/test_fuzz.py``: random programs run with fuseloop
and with numpy, compared within per-element bounds.

``profiles`` (quick and long), ``reference`` (numpy values with divergence bounds),
``programs`` (the program representation and its listing), ``generators`` (hypothesis
strategies for programs), ``harness`` (running a program both ways and comparing).
"""
