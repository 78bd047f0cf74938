"""Stage 3, analysis: the ledger evaluated for a workload (rows, totals, shares, closed forms, grids)."""
