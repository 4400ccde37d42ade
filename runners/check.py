"""`python -m runners.check TRAINER.py`: the README's command for the trainer check in
experiments/trainer_check/ (see runners/alias.py)."""

if __name__ == "__main__":
    from runners.alias import forward

    forward("experiments.trainer_check")
