"""Sweeps: the runs of a comparison planned against the store, then trained on an engine (local or Ray)."""
