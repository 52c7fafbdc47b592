"""rlf plugin ``deepsearch``: Search-R1-style search over a passage corpus, with QA rewards."""
