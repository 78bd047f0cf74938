"""Process plumbing: every way a run ends (errors), safe I/O, forked workers, optional imports."""
