"""`python -m runners.pretrain`: the README's command to rebuild artifacts/ (seed 11, 800 AdamW
steps), kept; the code lives in experiments/transformer/pretrain.py (see runners/alias.py)."""

if __name__ == "__main__":
    from runners.alias import forward

    forward("experiments.transformer.pretrain")
