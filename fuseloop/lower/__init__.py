"""Lowering: SSA programs to Loopy kernels."""
