"""`python -m runners.negatives` and `torchrun ... -m runners.negatives`: the README's commands for
the experiment in experiments/negatives/, kept (see runners/alias.py)."""

if __name__ == "__main__":
    from runners.alias import forward

    forward("experiments.negatives")
