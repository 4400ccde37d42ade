"""A trainer file with a syntax error on line 4 (for the check's exit-2 path)."""

VOCAB_SIZE = 11
def build_model(:
    pass
