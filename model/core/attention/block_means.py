"""Block means of a matrix given a block of rows at a time: thumbnails of attention patterns."""

from __future__ import annotations

import numpy as np
import torch

from attention_atlas.model.core.attention.arrays import to_device
from attention_atlas.model.core.attention.row_reduction import column_block_sums


class BlockMeans:
    """Block means of a (..., n_rows, n_cols) matrix given a block of rows at a time (its first columns: the
    others 0), each axis cut into `size` blocks (or one a position, where shorter) as `viz.thumbnails.resample`
    cuts it: (..., size, size) float32."""

    def __init__(self, lead: tuple[int, ...], n_rows: int, n_cols: int, size: int) -> None:
        row_starts = block_starts(n_rows, size)  # (blocks + 1,)
        self.row_block = np.searchsorted(row_starts[:-1], np.arange(n_rows), side="right") - 1  # (n_rows,)
        self.row_block_at = torch.from_numpy(self.row_block)  # the same where the rows are (moved once)
        self.row_counts = torch.from_numpy(np.diff(row_starts)).float()
        self.rows_each = n_rows // len(self.row_counts) if n_rows % len(self.row_counts) == 0 else 0  # 0: unequal
        self.col_starts = block_starts(n_cols, size)  # (blocks + 1,)
        self.col_counts = torch.from_numpy(np.diff(self.col_starts)).float()
        self.cols_each = n_cols // len(self.col_counts) if n_cols % len(self.col_counts) == 0 else 0
        self.counts = self.row_counts[:, None] * self.col_counts[None, :]  # (size, size) positions a block
        self.sums = torch.zeros(*lead, len(self.row_counts), len(self.col_counts))

    def restart(self) -> None:
        """Every sum 0 again, in place (where the sums are): one layout and its memory serve every layer of a summary
        (a fresh 1 MB of sums a layer cost 0.1 ms in page faults on the CPU)."""
        self.sums.zero_()

    def add(self, start: int, rows: torch.Tensor) -> None:
        """Rows start.. of the matrix, (..., block, width <= n_cols) float32: columns after `width` are 0. Rows are
        summed into their blocks first (whole rows added: one pass), then the few block rows by columns. The sums
        live where the rows do (the model's device, in a capture's summary)."""
        first, by_row_block = self._row_block_sums(start, rows)
        target = self.sums[..., first : first + by_row_block.shape[-2], :]
        if self.cols_each == 1:  # a block a column
            target[..., : rows.shape[-1]] += by_row_block
        else:
            target += column_block_sums(by_row_block, self.col_starts)

    def add_column_sums(self, start: int, sums: torch.Tensor) -> None:
        """Rows start.. of the matrix given as each row's sums over the column blocks, (..., block, column blocks)."""
        first, by_row_block = self._row_block_sums(start, sums)
        self.sums[..., first : first + by_row_block.shape[-2], :] += by_row_block

    def _row_block_sums(self, start: int, rows: torch.Tensor) -> tuple[int, torch.Tensor]:
        """(the first row block, (..., row blocks, width)): rows start.. summed into the row blocks they fall in
        (those blocks may have rows in other calls too). Moves the sums and the indices where the rows are, on first
        use, without waiting: no copy a block (on a GPU each would wait for it)."""
        if self.sums.device != rows.device:
            self.sums, self.counts = to_device(self.sums, rows.device), to_device(self.counts, rows.device)
            self.row_counts = to_device(self.row_counts, rows.device)
            self.row_block_at = to_device(self.row_block_at, rows.device)
        n, width = rows.shape[-2:]
        blocks = self.row_block[start : start + n]  # each row's block, ascending
        first, count = int(blocks[0]), int(blocks[-1] - blocks[0]) + 1
        if self.rows_each and start % self.rows_each == 0 and n % self.rows_each == 0:  # whole equal blocks
            return first, rows if self.rows_each == 1 else rows.unflatten(-2, (count, self.rows_each)).sum(-2)
        local = self.row_block_at[start : start + n] - first
        return first, rows.new_zeros(*rows.shape[:-2], count, width).index_add_(-2, local, rows)

    def means(self) -> torch.Tensor:
        """(..., size, size) float32 block means, where the rows were."""
        return self.sums / self.counts

    def result(self) -> torch.Tensor:
        """(..., size, size) float32 block means, on the CPU."""
        return self.means().cpu()


def block_starts(n: int, size: int) -> np.ndarray:
    """(min(n, size) + 1,): the first position of each of `size` blocks of n positions (one a position, where
    n < size), then n; `viz.thumbnails.resample` cuts them so."""
    size = min(n, size)
    return np.append((np.arange(size) * n) // size, n)
