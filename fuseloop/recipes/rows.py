"""Built-in recipes for kernels with reductions (kind ``"reduction"``).

A reduction kernel loops over output rows with ``i`` (role tag ``fl_row``;
and, when reductions are computed once per row and then used by every element
of it, over the row's elements with ``e``, tag ``fl_row_element``); reduction
``rid`` loops over ``j<rid>`` (tag ``fl_reduction``).  The lowering tags the row
loop with the access pattern it found (and names the kernel after it):

* ``fl_row_contiguous`` (``fuseloop_rows``): each row's reduced elements are contiguous (row sums,
  softmax, the pieces of a two-stage full reduction).  On GPUs one work-group
  takes a row: its work-items stride through the row together (coalesced)
  and combine their partial results in local memory.
* ``fl_row_strided`` (``fuseloop_cols``): the reduced elements are far apart but neighbouring rows
  are neighbours in memory (column sums, middle-axis reductions): neighbouring
  work-items take neighbouring outputs (on GPUs one output each, so their reads
  coalesce; on CPUs a block of ``column_width`` outputs, whose reductions walk
  the reduced axis together, a contiguous block of each row at a time, so the
  loop over the block vectorises; ``column_wide`` of them in a split's first stage
  whose pieces are at least ``column_wide_rows`` long).  When there are too few outputs to give
  every compute unit ``column_items`` work-items, evaluation splits the reduced
  axis across work-groups: a first stage of partial results over pieces of the
  rows, then a column reduction over the pieces (``splits.two_stage_split``).

On CPUs a work-item takes whole contiguous rows and loops through them sequentially.
"""

from .row_cpu import (
    CPU_ACCUMULATORS,
    CPU_COLUMN_ITEMS,
    CPU_COLUMN_WIDE,
    CPU_COLUMN_WIDE_ROWS,
    CPU_COLUMN_WIDTH,
    CPU_ROW_ITEM_ELEMENTS,
    CPU_ROWS_PER_ITEM,
    CPU_SELECT_ACCUMULATORS,
    CPU_SELECT_MIN,
    CPU_SELECT_STEPS,
    CPU_SHORT_ROWS,
    cpu_rows,
)
from .row_gpu import (
    GPU_BLOCK,
    GPU_COL_GROUP,
    GPU_COLUMN_ITEMS,
    GPU_REDUCTION_LANES,
    GPU_ROW_CACHE_ITEMS,
    GPU_ROW_GROUP,
    GPU_ROW_ITEMS,
    GPU_SHORT_MAX,
    GPU_SLICE_MAX,
    GPU_SLICE_ROWS,
    gpu_rows,
    make_gpu_rows,
    make_row_size_class,
)

__all__ = [
    "CPU_ACCUMULATORS", "CPU_COLUMN_ITEMS", "CPU_COLUMN_WIDE", "CPU_COLUMN_WIDE_ROWS",
    "CPU_COLUMN_WIDTH", "CPU_ROWS_PER_ITEM",
    "CPU_ROW_ITEM_ELEMENTS", "CPU_SELECT_ACCUMULATORS", "CPU_SELECT_MIN",
    "CPU_SELECT_STEPS", "CPU_SHORT_ROWS", "GPU_BLOCK", "GPU_COLUMN_ITEMS", "GPU_COL_GROUP",
    "GPU_REDUCTION_LANES", "GPU_ROW_CACHE_ITEMS", "GPU_ROW_GROUP", "GPU_ROW_ITEMS",
    "GPU_SHORT_MAX", "GPU_SLICE_MAX", "GPU_SLICE_ROWS", "cpu_rows", "gpu_rows",
    "make_gpu_rows", "make_row_size_class",
]
