"""Stage 2, the ledger: the builder walks the spec (mirroring model/ file for file) and emits every op's facts."""
