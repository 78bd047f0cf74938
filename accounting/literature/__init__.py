"""Stage 5, the literature's FLOP formulas, evaluated and reconciled beside the exact count."""
