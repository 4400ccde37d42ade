"""Section 07: the coverage matrix, the in-process checks that fill it, DistributedSampler.

The matrix's bookkeeping is checked against its status table; the checks' reference against
a per-token loss written out in plain Python; which cells a slip leaves blind against the
ledger's weights (a slip is invisible exactly when it weights every labelled microbatch by
1/N); the sampler against its documented algorithm rebuilt from torch.randperm.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pclab.core import coverage, coverage_checks, ledger, sampler
from pclab.core.coverage import Evidence
from pclab.core.validation import InvalidInput
from pclab.experiments.transformer import coverage as transformer_coverage

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- the matrix


def ev(
    row="tail_batch",
    column="loss",
    correct=0.0,
    slip=None,
    slip_run=True,
    source="in_process",
    tol=1e-12,
):
    return Evidence(row, column, source, correct, tol, slip, slip_run)


@pytest.mark.parametrize(
    "item, status",
    [
        (None, "not_run"),
        (ev(correct=1e-3), "broken"),
        (ev(correct=None), "broken"),
        (ev(correct=0.0, slip_run=False), "passed"),
        (ev(correct=1e-13, slip=1e-13), "blind"),
        (ev(correct=0.0, slip=0.5), "evidence"),
        (ev(correct=0.0, slip=None), "evidence"),  # the slip's value was not even finite
        (ev(correct=math.nan), "broken"),
    ],
)
def test_cell_status_table(item, status):
    assert coverage.cell_status(item) == status


def test_matrix_bookkeeping():
    items = [ev(column=c, slip=1.0) for c in coverage.COLUMNS]
    items += [ev(row="repeated_tokens", column=c, slip=0.0) for c in coverage.COLUMNS]
    items += [ev(row="unequal_lengths", column="loss", correct=1.0, slip=1.0)]
    items += [ev(row="non_divisible", column="loss", slip=1.0, source="torchrun")]
    matrix = coverage.coverage_matrix(items)
    assert matrix.cells[("tail_batch", "gradients")].status == "evidence"
    assert matrix.cells[("non_divisible", "loss")].status == "not_run"  # other source
    assert matrix.blind_rows == ("repeated_tokens",)
    assert matrix.broken == (("unequal_lengths", "loss"),)
    assert matrix.uncovered_columns == () and not matrix.complete
    torchrun = coverage.coverage_matrix(items, "torchrun")
    assert torchrun.cells[("non_divisible", "loss")].status == "evidence"
    assert set(torchrun.uncovered_columns) == {"gradients", "global_norm", "parameters"}
    later = coverage.coverage_matrix([ev(slip=1.0), ev(slip=0.0)])
    assert later.cells[("tail_batch", "loss")].status == "blind"


@PROPERTY
@given(
    st.lists(
        st.builds(
            ev,
            row=st.sampled_from(coverage.ROWS),
            column=st.sampled_from(coverage.COLUMNS),
            correct=st.one_of(st.none(), st.floats(0, 1e-11)),
            slip=st.one_of(st.none(), st.floats(0, 1.0)),
            slip_run=st.booleans(),
        ),
        max_size=40,
    )
)
def test_matrix_properties(items):
    matrix = coverage.coverage_matrix(items)
    measured = {(i.row, i.column) for i in items}
    statuses = {key: cell.status for key, cell in matrix.cells.items()}
    assert len(statuses) == len(coverage.ROWS) * len(coverage.COLUMNS)
    assert {k for k, s in statuses.items() if s != "not_run"} == measured
    assert matrix.complete == (
        len(measured) == len(statuses)
        and "broken" not in statuses.values()
        and all(
            any(statuses[(r, c)] == "evidence" for r in coverage.ROWS) for c in coverage.COLUMNS
        )
    )
    for row in matrix.blind_rows:
        assert {statuses[(row, c)] for c in coverage.COLUMNS} <= {"blind", "passed", "not_run"}


def test_matrix_rejects_bad_records():
    with pytest.raises(InvalidInput, match="^row='bogus'"):
        coverage.coverage_matrix([ev(row="bogus")])
    with pytest.raises(InvalidInput, match="^source='gpu'"):
        coverage.coverage_matrix([], "gpu")
    with pytest.raises(InvalidInput, match="^tolerance=-1"):
        coverage.coverage_matrix([ev(tol=-1)])
    with pytest.raises(TypeError):
        coverage.coverage_matrix([("tail_batch", "loss")])


def transformer_report(labels=(40, 7, 0, 23), padding=(0, 0, 0, 19)):
    """The shape of a pclab.experiments.transformer report (numbers from a real two-process run)."""
    losses = {
        "full_batch": 1.6736100670857244,
        "accum_global_n": 1.6736100670857241,
        "ddp_pn_scale": 1.673610067085724,
    }
    diffs = {
        "full_batch": 0.0,
        "accum_global_n": 1.1102230246251565e-16,
        "ddp_pn_scale": 1.1102230246251565e-16,
    }
    branches = [
        {
            "name": name,
            "optimizer": opt,
            "loss": losses.get(name, 2.255460393571104),
            "max_abs_diff": diffs.get(name, 0.0307),
        }
        for opt in ("sgd", "adamw")
        for name in (
            "full_batch",
            "accum_global_n",
            "accum_microbatch_mean",
            "ddp_mean_of_means",
            "ddp_pn_scale",
        )
    ]
    windows = [{"rank": r, "padding": p} for r, p in zip((0, 0, 1, 1), padding)]
    return {"tolerance": 2e-10, "labels": list(labels), "windows": windows, "branches": branches}


def test_evidence_from_a_transformer_report():
    assert transformer_coverage.evidence_from_transformer(None) == ()
    assert transformer_coverage.evidence_from_transformer({"ok": True}) == ()
    report = transformer_report()
    assert transformer_coverage.transformer_rows(report) == (
        "accumulation_window",
        "tail_batch",
        "unequal_lengths",
    )
    evidence = transformer_coverage.evidence_from_transformer(report)
    assert {(e.row, e.column) for e in evidence} == {
        (r, c)
        for r in transformer_coverage.transformer_rows(report)
        for c in transformer_coverage.TRANSFORMER_COLUMNS
    }
    loss = next(e for e in evidence if (e.row, e.column) == ("accumulation_window", "loss"))
    assert loss.correct_diff == abs(1.6736100670857241 - 1.6736100670857244)
    assert loss.slip_diff == pytest.approx(2.255460393571104 - 1.6736100670857244)
    matrix = coverage.coverage_matrix(evidence, "torchrun")
    assert {k for k, c in matrix.cells.items() if c.status == "evidence"} == {
        (e.row, e.column) for e in evidence
    }
    assert matrix.uncovered_columns == ("gradients", "global_norm")
    # An empty rank: the mean of local means is undefined (no loss, no parameters) - caught.
    report = transformer_report(labels=(0, 0, 5, 9), padding=(0, 0, 0, 0))
    for branch in report["branches"]:
        if branch["name"] == "ddp_mean_of_means":
            branch["loss"] = branch["max_abs_diff"] = None
    assert transformer_coverage.transformer_rows(report) == (
        "accumulation_window",
        "unequal_lengths",
        "empty_label_replica",
    )
    empty = [
        e
        for e in transformer_coverage.evidence_from_transformer(report)
        if e.row == "empty_label_replica"
    ]
    assert [coverage.cell_status(e) for e in empty] == ["evidence", "evidence"]
    assert all(e.slip_diff is None for e in empty)
    with pytest.raises(InvalidInput, match="^tolerance=-1"):
        transformer_coverage.evidence_from_transformer({**report, "tolerance": -1})


# ---------------------------------------------------------------- the in-process checks


def plain_reference_loss(row, seed):
    """sum over labelled positions of -log softmax, one token at a time in plain Python."""
    embed, head = (t.tolist() for t in coverage_checks._model(seed))
    total, count = 0.0, 0
    for replica in coverage_checks.scenario_batches(row, seed):
        for inputs, labels in replica:
            for token, label in zip(inputs.reshape(-1).tolist(), labels.reshape(-1).tolist()):
                if label == coverage_checks.IGNORE:
                    continue
                logits = [sum(embed[token][i] * head[i][j] for i in range(3)) for j in range(7)]
                top = max(logits)
                total += (
                    top + math.log(math.fsum(math.exp(z - top) for z in logits)) - logits[label]
                )
                count += 1
    return total / count, count


def expected_statuses(counts, slip, reference_norm):
    """Which comparisons can see the slip, predicted from the ledger's weights alone.

    A labelled microbatch's gradient enters with the slip's weight w_rk (an empty local
    mean has no labelled token, so its NaN loss back-propagates zeros). If every labelled
    microbatch gets the same alpha / N, the gradient is alpha times the right one: gradients
    and norm see it unless alpha = 1, and a clipped SGD step hides it when both norms are
    above the threshold. The logged loss also shows a NaN from any undefined local mean.
    """
    weights = ledger.microbatch_weights(counts, slip)
    n = ledger.global_count(counts)
    labelled = [w * n for w_row, n_row in zip(weights, counts) for w, c in zip(w_row, n_row) if c]
    alpha = labelled[0] if max(labelled) - min(labelled) <= 1e-15 else None
    exact = alpha is not None and abs(alpha - 1) <= 1e-15
    undefined = any(w is None for row in weights for w in row)
    tau = coverage_checks.MAX_NORM
    hidden_by_clip = alpha is not None and reference_norm >= tau and alpha * reference_norm >= tau
    blind = {
        "loss": exact and not undefined,
        "gradients": exact,
        "global_norm": exact,
        "parameters": exact or hidden_by_clip,
    }
    return {c: "blind" if b else "evidence" for c, b in blind.items()}


@pytest.mark.parametrize("slip", coverage_checks.SLIPS)
@pytest.mark.parametrize("seed", [0, 5])
def test_checks_fill_the_matrix_from_real_runs(slip, seed):
    run = coverage_checks.run_checks(slip, seed)
    matrix = coverage.coverage_matrix(run.evidence)
    assert matrix.broken == ()  # the lab's P/N path reproduces the reference everywhere
    assert all(cell.status != "not_run" for cell in matrix.cells.values())
    for detail in run.details:
        loss, count = plain_reference_loss(detail["row"], seed)
        assert detail["reference_loss"] == pytest.approx(loss, abs=1e-12)
        assert detail["num_valid_labels"] == count
        expected = expected_statuses(detail["counts"], slip, detail["reference_norm"])
        statuses = {c: matrix.cells[(detail["row"], c)].status for c in coverage.COLUMNS}
        assert statuses == expected, detail["row"]
    assert matrix.complete == (matrix.uncovered_columns == ())


def test_default_checks_show_a_blind_row_and_reject_bad_input():
    matrix = coverage.coverage_matrix(coverage_checks.run_checks().evidence)
    assert matrix.blind_rows == (
        "repeated_tokens",
    )  # equal counts: the microbatch mean is right by luck
    # Clipping hides the empty replica's halved gradient from the parameters, not from the norm.
    assert matrix.cells[("empty_label_replica", "parameters")].status == "blind"
    assert matrix.cells[("empty_label_replica", "global_norm")].status == "evidence"
    with pytest.raises(InvalidInput, match="^slip='global_token'"):
        coverage_checks.run_checks("global_token")
    with pytest.raises(InvalidInput, match="^seed=-1"):
        coverage_checks.run_checks(seed=-1)
    with pytest.raises(InvalidInput, match="^rows='bogus'"):
        coverage_checks.run_checks(rows=("bogus",))


# ---------------------------------------------------------------- DistributedSampler


def documented_sampler(n, ranks, seed, epoch, drop_last):
    """The algorithm torch documents, rebuilt from randperm: pad by repeating the head, or cut."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    per_rank = n // ranks if drop_last else math.ceil(n / ranks)
    total = per_rank * ranks
    padded = (order * math.ceil(total / n))[:total]
    return [padded[r::ranks] for r in range(ranks)]


@PROPERTY
@given(
    n=st.integers(1, 200),
    ranks=st.integers(1, 64),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 50),
    drop_last=st.booleans(),
)
def test_sampler_against_the_documented_algorithm(n, ranks, seed, epoch, drop_last):
    result = sampler.sampler_epoch(n, ranks, seed, epoch, drop_last)
    expected = documented_sampler(n, ranks, seed, epoch, drop_last)
    assert [list(ix) for ix in result.indices] == expected
    lengths = sampler.sample_lengths(n)
    assert result.dataset_tokens == sum(lengths)
    assert result.consumed_tokens == sum(lengths[i] for ix in expected for i in ix)
    extra = ranks * math.ceil(n / ranks) - n
    assert result.repeated_entries == (0 if drop_last else extra)
    assert result.dropped_samples == (n - ranks * (n // ranks) if drop_last else 0)
    assert sum(result.times_seen.values()) == n
    assert sum(k * c for k, c in result.times_seen.items()) == result.consumed_samples
    assert sum(r["repeats"] for r in result.rows) == result.repeated_entries
    assert all(16 <= x <= 96 for x in lengths)


def test_sampler_pads_with_repeats_and_bad_input_is_named():
    result = sampler.sampler_epoch(10, 4, 0)
    assert [r["samples"] for r in result.rows] == [3, 3, 3, 3]
    assert result.repeated_entries == 2 and result.consumed_tokens > result.dataset_tokens
    for kwargs, field in [
        ({"dataset_size": 0}, "dataset_size"),
        ({"dataset_size": 10_001}, "dataset_size"),
        ({"world_size": 0}, "world_size"),
        ({"world_size": 65}, "world_size"),
        ({"seed": -1}, "seed"),
    ]:
        with pytest.raises(InvalidInput, match=f"^{field}="):
            sampler.sampler_epoch(**{"dataset_size": 10, "world_size": 4, "seed": 0, **kwargs})
    with pytest.raises(InvalidInput, match="^drop_last='yes'"):
        sampler.sampler_epoch(10, 4, 0, drop_last="yes")
    with pytest.raises(TypeError):
        sampler.sampler_epoch("ten", 4, 0)
