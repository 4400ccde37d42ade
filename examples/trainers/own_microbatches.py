"""Correct, on a model that is no language model: a small regression network whose terms are
per-sample squared errors. make_microbatch(n_terms, generator) builds each microbatch with
exactly n_terms samples (the check verifies len(token_losses(...)) == n_terms); anything your
data looks like - labels taken from the inputs, a completion-only mask - goes here. Without
make_microbatch the check builds its LM microbatches from VOCAB_SIZE (then optional)."""

import torch
import torch.distributed as dist

__all__ = ["build_model", "make_microbatch", "token_losses", "train_step"]


def make_microbatch(n_terms, generator):
    x = torch.randn(n_terms, 3, generator=generator, dtype=torch.float64)
    return {"x": x, "y": torch.randn(n_terms, generator=generator, dtype=torch.float64)}


def build_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model.double()


def token_losses(model, microbatch):
    return (model(microbatch["x"]).squeeze(-1) - microbatch["y"]).pow(2)


def train_step(model, optimizer, microbatches):
    n = torch.tensor(float(sum(len(mb["y"]) for mb in microbatches)))
    dist.all_reduce(n)  # N: samples of every rank and microstep
    if n.item() == 0:
        return
    optimizer.zero_grad()
    for mb in microbatches:
        (token_losses(model, mb).sum() / n).backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
    optimizer.step()
