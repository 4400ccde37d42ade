"""Each blind resumable loop (blind_resume/) replayed by hand on a `blind_resume_reference.
Launch`: every rank in one process, one model (the ranks' replicas stay equal), its `.grad`
the sum of every rank's (what the loops' summed all_reduce gives), the file's own optimizer
and schedule as torch objects, and the checkpoint a dict that outlives the launch. Each
replay is what its file does on a fresh start and, finding a checkpoint, on a restart; a
kill is the launch's forward of the kill point's microbatch raising `Killed`. No pclab code.
"""

from __future__ import annotations


def _restart(run, scheduler=None) -> dict:
    return run.load(scheduler) or {}


def _window_ends(run, e: int, i: int, k: int) -> bool:
    return i % k == k - 1 or i == run.size(e) - 1


def _per_microbatch(run, k: int, keep_grad: bool):
    """A checkpoint after every microbatch (after the step at a window's end), with the
    summed `.grad` (every rank's own file) or without it; a restart goes on from the next."""
    windows = [run.windows(e, k) for e in run.epochs]
    scheduler = run.scheduler(k)
    at = tuple(_restart(run, scheduler).get("next", (0, 0)))
    for e in run.epochs:
        for i in range(run.size(e)):
            n = windows[e][i // k][2]
            if (e, i) < at or not n:
                continue
            if keep_grad and i % k == 0:
                run.zero_grad()
            run.backward(e, i, 1 / n)
            if _window_ends(run, e, i, k):
                run.step()
                scheduler.step()
                run.zero_grad()
            run.save(scheduler, grad=keep_grad, next=(e, i + 1))
    return run


def keeps_the_window_gradient(run, k):
    return _per_microbatch(run, k, keep_grad=True)


def drops_the_window_gradient(run, k):
    return _per_microbatch(run, k, keep_grad=False)


def skips_one_window_too_many(run, k):
    scheduler = run.scheduler(k)
    state = _restart(run, scheduler)
    flat = [(e, *w) for e in run.epochs for w in run.windows(e, k)]
    for j in range(state["windows_done"] + 1 if state else 0, len(flat)):
        e, start, stop, n = flat[j]
        if n:
            run.zero_grad()
            for i in range(start, stop):
                run.backward(e, i, 1 / n)
            run.step()
            scheduler.step()
            run.save(scheduler, windows_done=j + 1)
    return run


def counter_restarts_at_zero(run, k):
    scheduler = run.scheduler(k)
    at = tuple(_restart(run, scheduler).get("next", (0, 0)))
    run.zero_grad()
    for e in run.epochs:
        if e < at[0]:
            continue
        skipped, m = (at[1] if e == at[0] else 0), run.size(e)
        for step in range(m - skipped):  # enumerate over what is left: from 0 again
            i = skipped + step
            if step % k == 0:
                n = run.count(e, i, min(i + k, m))
            if n:
                run.backward(e, i, 1 / n)
            if (step + 1) % k == 0 or step + 1 == m:
                if n:
                    run.step()
                    scheduler.step()
                    run.zero_grad()
                run.save(scheduler, next=(e, i + 1))
    return run


def restarts_the_epoch(run, k):
    scheduler = run.scheduler(k)
    for e in range(_restart(run, scheduler).get("epoch", 0), len(run.epochs)):
        for start, stop, n in run.windows(e, k):
            if n:
                run.zero_grad()
                for i in range(start, stop):
                    run.backward(e, i, 1 / n)
                run.step()
                scheduler.step()
                run.save(scheduler, epoch=e + (stop == run.size(e)))
    return run


def forgets_scheduler(run, k):
    at = tuple(_restart(run).get("next", (0, 0)))  # the optimizer loaded, no scheduler saved
    scheduler = run.scheduler(k)  # built after the load: the schedule's first rate
    for e in run.epochs:
        for w, (start, stop, n) in enumerate(run.windows(e, k)):
            if (e, w) < at or not n:
                continue
            run.zero_grad()
            for i in range(start, stop):
                run.backward(e, i, 1 / n)
            run.step()
            scheduler.step()
            run.save(None, next=(e, w + 1))
    return run


def accelerate_like_update_boundary(run, k):
    scheduler = run.scheduler(k)
    done = _restart(run, scheduler).get("completed_updates", 0)
    live = [(e, start, stop, n) for e in run.epochs for start, stop, n in run.windows(e, k) if n]
    for e, start, stop, n in live[done:]:  # the interrupted window again from its start
        run.zero_grad()
        for i in range(start, stop):
            run.backward(e, i, 1 / n)
        run.step()
        scheduler.step()
        done += 1
        run.save(scheduler, completed_updates=done)
    return run


def leaves_out_the_optimizer(run, k):
    """Restores the model, the scheduler (and gives its rate back to the optimizer's groups)
    and the consumed count; re-creates AdamW: the launch's own, built fresh (count 0)."""
    scheduler = run.scheduler(k)
    state = run.load(scheduler)  # no optimizer on the disk: AdamW stays as built
    if state:
        for group, lr in zip(run.optimizer.param_groups, scheduler.get_last_lr()):
            group["lr"] = lr
    consumed = state["consumed"] if state else 0
    for e in run.epochs:
        for start, stop, n in run.windows(e, k):
            if run.index(e, start) < consumed or not n:
                continue
            run.zero_grad()
            for i in range(start, stop):
                run.backward(e, i, 1 / n)
            run.step()
            scheduler.step()
            run.save(scheduler, optimizer=False, consumed=run.index(e, stop - 1) + 1)
    return run


REPLAYS = {
    f.__name__: f
    for f in (
        keeps_the_window_gradient,
        accelerate_like_update_boundary,
        skips_one_window_too_many,
        counter_restarts_at_zero,
        drops_the_window_gradient,
        restarts_the_epoch,
        forgets_scheduler,
        leaves_out_the_optimizer,
    )
}
