"""`python -m runners.clipping` and `torchrun ... -m runners.clipping`: the README's commands for
the experiment in experiments/clipping/, kept (see runners/alias.py)."""

if __name__ == "__main__":
    from runners.alias import forward

    forward("experiments.clipping")
