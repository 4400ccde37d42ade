"""`python -m runners.transformer` and `torchrun ... -m runners.transformer`: the README's
commands for the experiment in experiments/transformer/, kept (see runners/alias.py)."""

if __name__ == "__main__":
    from runners.alias import forward

    forward("experiments.transformer")
