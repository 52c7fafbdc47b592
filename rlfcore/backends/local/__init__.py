"""Trainers. ``local``: GRPO (and an SFT warm start) in one process, on CPU or one GPU."""
